'use strict'
// node consume_group.js '{"bootstrap": "127.0.0.1:9092", "topic": "t", "group": "g",
//                         "expected": 40, "timeoutMs": 30000, "settleMs": 500,
//                         "readUncommitted": false}'
// Subscribes in consumer group `group` from the beginning (kafkajs has no manual assignment)
// and prints each record it reads as a JSON line {partition, offset, key, value, headers,
// timestamp}, until `expected` records arrived (then `settleMs` more, to catch extras) or the
// timeout; then {"done": true, "count": n, "timedOut": bool}. Offsets are committed by
// kafkajs (autoCommit) and the member leaves the group on disconnect. kafkajs reads
// read_committed unless `readUncommitted` is true.
const { spec, emit, client, b64, headersFromKafkajs, hardDeadline } = require('./lib')

async function main () {
  const s = spec()
  const timeoutMs = s.timeoutMs || 30000
  hardDeadline(timeoutMs + 20000)
  const kafka = client(s, 'consumer')
  const consumer = kafka.consumer({
    groupId: s.group,
    sessionTimeout: s.sessionTimeoutMs || 10000,
    heartbeatInterval: 1000,
    maxWaitTimeInMs: 200,
    readUncommitted: !!s.readUncommitted,
    retry: { retries: 8, initialRetryTime: 100, maxRetryTime: 2000 },
  })
  let count = 0
  let finish
  const finished = new Promise((resolve) => { finish = resolve })
  const timer = setTimeout(() => finish(true), timeoutMs)
  let settle = null
  consumer.on(consumer.events.CRASH, (e) => {
    process.stderr.write(`consumer crashed: ${e.payload && e.payload.error}\n`)
  })
  await consumer.connect()
  try {
    await consumer.subscribe({ topics: [s.topic], fromBeginning: true })
    await consumer.run({
      eachMessage: async ({ partition, message }) => {
        count += 1
        emit({
          partition,
          offset: Number(message.offset),
          key: b64(message.key),
          value: b64(message.value),
          headers: headersFromKafkajs(message.headers),
          timestamp: Number(message.timestamp),
        })
        if (count >= s.expected && settle === null) {
          settle = setTimeout(() => finish(false), s.settleMs === undefined ? 500 : s.settleMs)
        }
      },
    })
    const timedOut = await finished
    clearTimeout(timer)
    if (settle) clearTimeout(settle)
    emit({ done: true, count, timedOut })
  } finally {
    await consumer.disconnect()
  }
}

main().then(() => process.exit(0), (err) => {
  process.stderr.write(`consume_group.js failed: ${err && err.stack ? err.stack : err}\n`)
  process.exit(1)
})
