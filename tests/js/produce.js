'use strict'
// node produce.js '{"bootstrap": "127.0.0.1:9092", "topic": "t", "codec": "none|gzip|snappy|lz4",
//                   "create": {"partitions": 3} | null, "timeoutMs": 30000}'
// stdin: a JSON array of records {partition, key, value, headers: [[name, b64]], timestamp}
// stdout: {"partition": p, "offset": o} per record, in input order, then {"done": true}.
const { CODECS, spec, emit, client, unb64, headersToKafkajs, hardDeadline } = require('./lib')

async function readStdin () {
  const chunks = []
  for await (const chunk of process.stdin) chunks.push(chunk)
  return JSON.parse(Buffer.concat(chunks).toString('utf8'))
}

async function main () {
  const s = spec()
  hardDeadline((s.timeoutMs || 30000) + 10000)
  const records = await readStdin()
  const kafka = client(s, 'producer')
  if (s.create) {
    const admin = kafka.admin()
    await admin.connect()
    try {
      await admin.createTopics({
        topics: [{ topic: s.topic, numPartitions: s.create.partitions, replicationFactor: 1 }],
        waitForLeaders: true,
        timeout: 10000,
      })
    } finally {
      await admin.disconnect()
    }
  }
  const producer = kafka.producer({ allowAutoTopicCreation: false })
  await producer.connect()
  try {
    // One send: kafkajs builds one batch per partition, records in order, so a record's
    // offset is its partition's base offset plus its position in that partition.
    const result = await producer.send({
      topic: s.topic,
      acks: -1,
      timeout: 15000,
      compression: CODECS[s.codec || 'none'],
      messages: records.map((r) => ({
        partition: r.partition,
        key: unb64(r.key),
        value: unb64(r.value),
        headers: headersToKafkajs(r.headers || []),
        timestamp: String(r.timestamp),
      })),
    })
    const base = {}
    for (const m of result) {
      if (m.errorCode !== 0) throw new Error(`partition ${m.partition}: error ${m.errorCode}`)
      base[m.partition] = Number(m.baseOffset)
    }
    const seen = {}
    for (const r of records) {
      const i = seen[r.partition] || 0
      seen[r.partition] = i + 1
      emit({ partition: r.partition, offset: base[r.partition] + i })
    }
    emit({ done: true })
  } finally {
    await producer.disconnect()
  }
}

main().then(() => process.exit(0), (err) => {
  process.stderr.write(`produce.js failed: ${err && err.stack ? err.stack : err}\n`)
  process.exit(1)
})
