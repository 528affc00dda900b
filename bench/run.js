// `npm run bench`: every configuration in its own process, rounds interleaved (A B C A B C ...),
// medians reported, so that drift on a noisy machine falls on every configuration alike.
// BENCH_ROUNDS, BENCH_SECONDS and BENCH_UPLOAD_MIB shorten or lengthen it; BENCH_ONLY=large (or
// small, sweep) runs one part and prints its medians without writing the report.
import { createHash, randomBytes } from 'node:crypto'
import { cpus } from 'node:os'
import { requestsPerSecond, startServer, upload } from './clients.js'
import { writeReport } from './report.js'

const rounds = Number(process.env.BENCH_ROUNDS ?? 5)
const seconds = Number(process.env.BENCH_SECONDS ?? 5)
const uploadMiB = Number(process.env.BENCH_UPLOAD_MIB ?? 1024)
const KiB = 1024
const MiB = 1024 * KiB

const median = (values) => {
  const sorted = [...values].sort((a, b) => a - b)
  const middle = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
}
const digestField = (algorithm, chunks) => {
  const hash = createHash(algorithm === 'sha-256' ? 'sha256' : 'sha512')
  for (const chunk of chunks) hash.update(chunk)
  return `${algorithm}=:${hash.digest('base64')}:`
}
const log = (line) => process.stderr.write(line + '\n')

/** Runs each named measurement once a round, in the same order every round; returns medians. */
async function interleave (names, measure) {
  const samples = Object.fromEntries(names.map((name) => [name, []]))
  for (let round = 0; round < rounds; round++) {
    for (const name of names) {
      const value = await measure(name)
      samples[name].push(value)
      log(`round ${round + 1}/${rounds} ${name}: ${JSON.stringify(value)}`)
    }
  }
  return samples
}

async function smallRequests (servers) {
  // A 1 KiB JSON document: a few fields and a description that pads it to exactly 1024 bytes.
  const fields = { id: 42, name: 'quarterly report', tags: ['finance', 'q3'], description: '' }
  const payload = JSON.stringify({ ...fields, description: 'x'.repeat(KiB - JSON.stringify(fields).length) })
  const configs = {
    'bare Fastify': [servers.bare, {}],
    'plugin, no digest field': [servers.plugin, {}],
    'plugin, sha-256 Content-Digest': [servers.plugin, { 'content-digest': digestField('sha-256', [payload]) }],
    'plugin, sha-512 Content-Digest': [servers.plugin, { 'content-digest': digestField('sha-512', [payload]) }],
    'hand-written, sha-256 Content-Digest': [servers.handwritten, { 'content-digest': digestField('sha-256', [payload]) }]
  }
  const measure = (name, duration = seconds) => {
    const [server, headers] = configs[name]
    return requestsPerSecond({
      url: server.url, path: '/json', headers: { 'content-type': 'application/json', ...headers }, body: payload, connections: 64, pipelining: 10, seconds: duration
    })
  }
  for (const name of Object.keys(configs)) await measure(name, 1)
  const samples = await interleave(Object.keys(configs), measure)
  return { bytes: Buffer.byteLength(payload), samples }
}

async function largeUploads () {
  const block = randomBytes(MiB)
  const blocks = uploadMiB
  const all = Array(blocks).fill(block)
  const fields = { 'sha-256': digestField('sha-256', all), 'sha-512': digestField('sha-512', all) }
  const configs = {
    'bare Fastify, no verification': ['bare', {}],
    'plugin, no digest field': ['plugin', {}],
    'plugin, sha-256': ['plugin', { 'content-digest': fields['sha-256'] }],
    'plugin, sha-512': ['plugin', { 'content-digest': fields['sha-512'] }],
    'hand-written, sha-256': ['handwritten', { 'content-digest': fields['sha-256'] }]
  }
  // The physical floor: what createHash alone costs for the same bytes, measured in this run.
  const floor = (algorithm) => {
    const before = process.cpuUsage()
    const hash = createHash(algorithm)
    for (const chunk of all) hash.update(chunk)
    hash.digest()
    const { user, system } = process.cpuUsage(before)
    return (user + system) / 1e6
  }
  const samples = await interleave([...Object.keys(configs), 'createHash sha-256', 'createHash sha-512'], async (name) => {
    if (name.startsWith('createHash')) return { cpu: floor(name.endsWith('256') ? 'sha256' : 'sha512') }
    const [variant, headers] = configs[name]
    // A fresh process for each upload, so that its peak RSS belongs to this upload alone.
    const server = await startServer(variant)
    try {
      const before = await server.stats()
      const wall = await upload(server.url, block, blocks, headers)
      const after = await server.stats()
      return { wall, cpu: after.cpu - before.cpu, maxRSS: after.maxRSS, idleRSS: before.maxRSS }
    } finally {
      await server.stop()
    }
  })
  return { bytes: block.length * blocks, samples }
}

async function sweep (servers) {
  const sizes = [KiB, 16 * KiB, 256 * KiB, MiB, 4 * MiB, 16 * MiB, 64 * MiB]
  const results = []
  for (const size of sizes) {
    const body = randomBytes(size)
    const field = digestField('sha-256', [body])
    const configs = {
      bare: [servers.bare, {}],
      plugin: [servers.plugin, { 'content-digest': field }],
      'hand-written': [servers.handwritten, { 'content-digest': field }]
    }
    const samples = await interleave(Object.keys(configs), (name) => {
      const [server, headers] = configs[name]
      return requestsPerSecond({
        url: server.url,
        path: '/bytes',
        headers: { 'content-type': 'application/octet-stream', ...headers },
        body,
        connections: size >= 4 * MiB ? 2 : 8,
        pipelining: 1,
        seconds: Math.max(2, seconds / 2)
      })
    })
    results.push({ size, samples })
  }
  return results
}

const only = process.env.BENCH_ONLY
const parts = only ? only.split(',') : ['small', 'sweep', 'large']
const started = new Date()
const servers = {
  bare: await startServer('bare'),
  plugin: await startServer('plugin'),
  handwritten: await startServer('handwritten')
}
let small, sizes, large
try {
  if (parts.includes('small')) small = await smallRequests(servers)
  if (parts.includes('sweep')) sizes = await sweep(servers)
} finally {
  await Promise.all(Object.values(servers).map((server) => server.stop()))
}
if (parts.includes('large')) large = await largeUploads()

if (only) {
  for (const [part, result] of Object.entries({ small, sizes, large })) {
    if (result !== undefined) log(`${part}: ${JSON.stringify(result)}`)
  }
  process.exit(0)
}
await writeReport({
  started,
  machine: { cpu: cpus()[0]?.model ?? 'unknown', cores: cpus().length, node: process.version },
  settings: { rounds, seconds, uploadMiB },
  median,
  small,
  large,
  sizes
})
