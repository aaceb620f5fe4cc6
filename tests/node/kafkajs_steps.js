// Runs KafkaJS steps against a broker for tests/integration/test_kafkajs*.py.
//
// Input (argv[2], JSON): {"brokers": ["127.0.0.1:9092"], "steps": [{"op": ..., "args": ...}]}.
// Output (stdout, JSON): {"results": [...]}, one per step in order: {"ok": value} or
// {"error": {name, type, code, retriable, message, cause, groups, partitions}} as KafkaJS
// reported it. A failed step does not stop the next one.
//
// Ops: any admin method (createPartitions, alterConfigs, describeConfigs, deleteTopicRecords,
// deleteGroups, fetchOffsets, fetchTopicOffsets, ...) with `args` as its argument; and
//   send           {topic, messages, acks?, compression?}         a plain producer
//   transaction    {transactionalId, topic, messages, outcome}    outcome "commit" | "abort"
//   openTransaction/finishTransaction {transactionalId, ...}      a transaction left open
//   consume        {groupId, topic, count, readUncommitted?, maxBytes?, timeoutMs?}
//   joinGroup/leaveGroup {groupId, topic}                         a member that stays
'use strict'

const { CompressionTypes, Kafka, logLevel } = require('kafkajs')

const STEP_TIMEOUT_MS = 20000

function describeError(e) {
  if (e === undefined || e === null) return null
  const out = {
    name: e.name,
    type: e.type,
    code: e.code,
    retriable: e.retriable,
    message: e.message,
  }
  const cause = e.cause || e.originalError
  if (cause) out.cause = describeError(cause)
  if (Array.isArray(e.groups)) {
    out.groups = e.groups.map(g => ({ groupId: g.groupId, error: describeError(g.error) }))
  }
  if (Array.isArray(e.partitions)) {
    out.partitions = e.partitions.map(p => ({
      partition: p.partition,
      offset: p.offset,
      error: describeError(p.error),
    }))
  }
  return out
}

function withTimeout(promise, what, ms = STEP_TIMEOUT_MS) {
  let timer
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer after ${ms} ms`)), ms)
  })
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer))
}

function toMessages(messages) {
  return messages.map(m => ({
    key: m.key === undefined ? null : m.key,
    value: m.value,
    partition: m.partition,
    headers: m.headers,
  }))
}

async function consume(kafka, { groupId, topic, count, readUncommitted, maxBytes, timeoutMs }) {
  const options = { groupId, readUncommitted: !!readUncommitted }
  if (maxBytes !== undefined) {
    options.maxBytes = maxBytes
    options.maxBytesPerPartition = maxBytes
  }
  const consumer = kafka.consumer(options)
  const got = []
  await consumer.connect()
  try {
    await consumer.subscribe({ topics: [topic], fromBeginning: true })
    await new Promise((resolve, reject) => {
      const timer = setTimeout(resolve, timeoutMs || STEP_TIMEOUT_MS)
      consumer
        .run({
          eachMessage: async ({ partition, message }) => {
            got.push({
              partition,
              offset: message.offset,
              key: message.key === null ? null : message.key.toString(),
              value: message.value === null ? null : message.value.toString(),
            })
            if (got.length >= count) {
              clearTimeout(timer)
              resolve()
            }
          },
        })
        .catch(reject)
    })
  } finally {
    await consumer.disconnect() // commits the offsets consumed
  }
  return got
}

async function main() {
  const { brokers, steps } = JSON.parse(process.argv[2])
  const kafka = new Kafka({
    clientId: 'onceflow-kafkajs-test',
    brokers,
    logLevel: logLevel.ERROR,
    retry: { retries: 2, initialRetryTime: 100 },
  })
  const admin = kafka.admin()
  await admin.connect()
  const producers = new Map()
  const members = new Map()
  const results = []

  async function transactionalProducer(transactionalId) {
    if (!producers.has(transactionalId)) {
      const p = kafka.producer({ transactionalId, idempotent: true, maxInFlightRequests: 1 })
      await p.connect()
      producers.set(transactionalId, p)
    }
    return producers.get(transactionalId)
  }

  const ops = {
    async send({ topic, messages, acks, compression }) {
      const p = kafka.producer()
      await p.connect()
      try {
        return await p.send({
          topic,
          messages: toMessages(messages),
          acks: acks === undefined ? -1 : acks,
          compression: compression || CompressionTypes.None,
        })
      } finally {
        await p.disconnect()
      }
    },
    async transaction({ transactionalId, topic, messages, outcome }) {
      const p = await transactionalProducer(transactionalId)
      const txn = await p.transaction()
      await txn.send({ topic, messages: toMessages(messages) })
      await (outcome === 'abort' ? txn.abort() : txn.commit())
      return outcome
    },
    async openTransaction({ transactionalId, topic, messages }) {
      const p = await transactionalProducer(transactionalId)
      const txn = await p.transaction()
      await txn.send({ topic, messages: toMessages(messages) })
      p.openTxn = txn
      return 'open'
    },
    async finishTransaction({ transactionalId, outcome }) {
      const p = producers.get(transactionalId)
      await (outcome === 'abort' ? p.openTxn.abort() : p.openTxn.commit())
      return outcome
    },
    consume: args => consume(kafka, args),
    async joinGroup({ groupId, topic }) {
      const consumer = kafka.consumer({ groupId })
      await consumer.connect()
      const joined = new Promise(resolve => consumer.on(consumer.events.GROUP_JOIN, resolve))
      await consumer.subscribe({ topics: [topic], fromBeginning: true })
      await consumer.run({ eachMessage: async () => {} })
      const event = await joined
      members.set(groupId, consumer)
      return event.payload.memberAssignment
    },
    async leaveGroup({ groupId }) {
      await members.get(groupId).disconnect()
      members.delete(groupId)
      return 'left'
    },
  }

  for (const { op, args } of steps) {
    try {
      const run = ops[op] ? ops[op](args) : admin[op](args)
      const value = await withTimeout(run, op)
      results.push({ ok: value === undefined ? null : value })
    } catch (e) {
      results.push({ error: describeError(e) })
    }
  }

  for (const consumer of members.values()) await consumer.disconnect()
  for (const p of producers.values()) await p.disconnect()
  await admin.disconnect()
  process.stdout.write(JSON.stringify({ results }))
}

main().catch(e => {
  process.stderr.write(`${e.stack || e}\n`)
  process.exit(1)
})
