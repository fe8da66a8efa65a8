'use strict'
// Shared by the kafkajs helper scripts that tests/integration/test_kafkajs.py runs.
// Protocol with the test: one JSON spec as argv[2]; results as JSON lines on stdout; kafkajs
// logs go to stderr. Binary keys/values/header values travel as base64 (null stays null).
const { Kafka, logLevel, CompressionTypes, CompressionCodecs } = require('kafkajs')
const SnappyCodec = require('kafkajs-snappy')
const LZ4Codec = require('kafkajs-lz4')

CompressionCodecs[CompressionTypes.Snappy] = SnappyCodec
CompressionCodecs[CompressionTypes.LZ4] = new LZ4Codec().codec

const CODECS = {
  none: CompressionTypes.None,
  gzip: CompressionTypes.GZIP,
  snappy: CompressionTypes.Snappy,
  lz4: CompressionTypes.LZ4,
}

function spec () {
  if (process.argv.length < 3) {
    process.stderr.write(`usage: node ${process.argv[1]} SPEC_JSON\n`)
    process.exit(2)
  }
  return JSON.parse(process.argv[2])
}

function emit (obj) {
  process.stdout.write(JSON.stringify(obj) + '\n')
}

function stderrLogger () {
  return ({ namespace, level, label, log }) => {
    const { message, ...extra } = log
    process.stderr.write(`[kafkajs ${label} ${namespace}] ${message} ${JSON.stringify(extra)}\n`)
  }
}

function client (s, name) {
  const level = process.env.KAFKAJS_LOG_LEVEL === 'debug' ? logLevel.DEBUG
    : process.env.KAFKAJS_LOG_LEVEL === 'info' ? logLevel.INFO : logLevel.WARN
  return new Kafka({
    clientId: `shoal-it-kafkajs-${name}`,
    brokers: [s.bootstrap],
    connectionTimeout: 5000,
    requestTimeout: 15000,
    retry: { retries: 8, initialRetryTime: 100, maxRetryTime: 2000 },
    logLevel: level,
    logCreator: stderrLogger,
  })
}

const b64 = (buf) => (buf === null || buf === undefined ? null : Buffer.from(buf).toString('base64'))
const unb64 = (s) => (s === null || s === undefined ? null : Buffer.from(s, 'base64'))

// [[name, base64], ...] <-> kafkajs headers object (a repeated name becomes an array).
function headersToKafkajs (pairs) {
  const out = {}
  for (const [name, value] of pairs) {
    const v = unb64(value)
    if (!(name in out)) out[name] = v
    else if (Array.isArray(out[name])) out[name].push(v)
    else out[name] = [out[name], v]
  }
  return out
}

function headersFromKafkajs (headers) {
  const out = []
  for (const [name, value] of Object.entries(headers || {})) {
    for (const v of Array.isArray(value) ? value : [value]) out.push([name, b64(v)])
  }
  return out
}

// Exit no matter what once the test's deadline has passed.
function hardDeadline (ms) {
  const t = setTimeout(() => {
    process.stderr.write(`hard deadline of ${ms} ms reached\n`)
    process.exit(3)
  }, ms)
  t.unref()
}

module.exports = { CODECS, spec, emit, client, b64, unb64, headersToKafkajs, headersFromKafkajs, hardDeadline }
