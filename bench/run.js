// `npm run bench`: a benchmark that cannot flatter. Every measurement gets a fresh server process
// and a warm-up; the configurations of a part run once a round in a new shuffled order each round;
// servers (and the createHash floor) run on one core and the load generator on another when
// taskset can pin them; every comparison is a ratio taken within a round, reported as the median
// of the rounds with their range.
// BENCH_ROUNDS, BENCH_SECONDS and BENCH_UPLOAD_MIB lengthen or shorten it, BENCH_SEED replays an
// order, and BENCH_ONLY=small,pipelined,sweep,uploads,downloads,static,resumable,client runs some parts and prints
// their samples without writing the report.
import { randomBytes } from 'node:crypto'
import { mkdtemp, rm, stat, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { download, getEach, hashAlone, pinned, requestsPerSecond, startServer, undiciDownload, undiciRequests, upload } from './clients.js'
import { clientSection, largeSection, resumableSection, smallRequestsPart, staticSection, writeReport } from './report.js'
import { benchSeed, digestField, seededShuffle, smallJsonBody } from './shared.js'

const rounds = Number(process.env.BENCH_ROUNDS ?? 5)
const seconds = Number(process.env.BENCH_SECONDS ?? 5)
const uploadMiB = Number(process.env.BENCH_UPLOAD_MIB ?? 1024)
const seed = benchSeed
const parts = (process.env.BENCH_ONLY ?? 'small,pipelined,sweep,uploads,downloads,static,resumable,client').split(',')
const KiB = 1024
const MiB = 1024 * KiB
const log = (line) => process.stderr.write(line + '\n')
log(`bench: seed ${seed} (BENCH_SEED replays the order), ${pinned ? 'pinned with taskset' : 'not pinned'}`)

const shuffled = seededShuffle(seed)

/** Measures every configuration once a round, in a new random order each round: samples by name, in round order. */
async function measureRounds (label, names, measure) {
  const samples = Object.fromEntries(names.map((name) => [name, []]))
  for (let round = 0; round < rounds; round++) {
    for (const name of shuffled(names)) {
      const sample = await measure(name)
      samples[name].push(sample)
      log(`${label} round ${round + 1}/${rounds} ${name}: ${JSON.stringify(sample)}`)
    }
  }
  return samples
}

async function withServer (variant, use, env) {
  const server = await startServer(variant, env)
  try {
    return await use(server)
  } finally {
    await server.stop()
  }
}

async function smallRequests (pipelining) {
  const body = smallJsonBody()
  const sha256 = { 'content-digest': digestField('sha-256', [body]) }
  const sha512 = { 'content-digest': digestField('sha-512', [body]) }
  const repr = { 'repr-digest': digestField('sha-256', [body]) }
  const configs = {
    'bare Fastify': ['bare', {}],
    'plugin, no digest field': ['plugin', {}],
    'plugin, sha-256': ['plugin', sha256],
    // Every connection alternates a request with the field and one without: the object-shape
    // effect, if any, of both kinds in one process.
    'plugin, half with sha-256': ['plugin', {}, [{}, { headers: { 'content-type': 'application/json', ...sha256 } }]],
    'plugin, sha-512': ['plugin', sha512],
    'plugin, Repr-Digest sha-256': ['plugin', repr],
    // The least code that keeps the same guarantee (bench/floor.js): what the plugin is measured against.
    'floor, sha-256': ['floor', sha256],
    'floor, sha-512': ['floor', sha512],
    'floor, Repr-Digest sha-256': ['floor', repr],
    'raw-body comparator, sha-256': ['raw-body', sha256],
    'streaming comparator, sha-256': ['streaming', sha256]
  }
  const samples = await measureRounds(pipelining === 1 ? 'small' : 'pipelined', Object.keys(configs), (name) => {
    const [variant, headers, requests] = configs[name]
    return withServer(variant, (server) => requestsPerSecond({
      server, path: '/json', headers: { 'content-type': 'application/json', ...headers }, body, connections: 50, pipelining, warmup: 2, seconds, requests
    }))
  })
  return { bytes: Buffer.byteLength(body), pipelining, samples }
}

async function sweep () {
  const sizes = [KiB, 16 * KiB, 256 * KiB, MiB, 4 * MiB, 16 * MiB, 64 * MiB]
  const results = []
  for (const size of sizes) {
    const body = randomBytes(size)
    const field = { 'content-digest': digestField('sha-256', [body]) }
    const configs = { bare: ['bare', {}], plugin: ['plugin', field], 'raw-body': ['raw-body', field], streaming: ['streaming', field] }
    const samples = await measureRounds(`sweep ${size / KiB} KiB`, Object.keys(configs), (name) => {
      const [variant, headers] = configs[name]
      return withServer(variant, (server) => requestsPerSecond({
        server,
        path: '/bytes',
        headers: { 'content-type': 'application/octet-stream', ...headers },
        body,
        connections: size >= 4 * MiB ? 2 : 8,
        pipelining: 1,
        warmup: 1,
        // Long enough for dozens of the largest bodies.
        seconds: size >= 16 * MiB ? seconds : Math.max(2, seconds / 2)
      }))
    })
    results.push({ size, samples })
  }
  return results
}

async function uploads () {
  const block = randomBytes(MiB)
  const warmupBlocks = 64
  const fields = (algorithm, blocks) => ({ 'content-digest': digestField(algorithm, Array(blocks).fill(block)) })
  const headers = {}
  for (const algorithm of ['sha-256', 'sha-512']) headers[algorithm] = { measured: fields(algorithm, uploadMiB), warmup: fields(algorithm, warmupBlocks) }
  const none = { measured: {}, warmup: {} }
  const configs = {
    'plugin, no digest field': ['plugin', none],
    'plugin, sha-256': ['plugin', headers['sha-256']],
    'plugin, sha-512': ['plugin', headers['sha-512']],
    'streaming comparator, sha-256': ['streaming', headers['sha-256']],
    'raw-body comparator, sha-256': ['raw-body', headers['sha-256']],
    'Fastify alone, createHash in the route, sha-256': ['hashing', headers['sha-256']],
    'Fastify alone, createHash in the route, sha-512': ['hashing', headers['sha-512']]
  }
  // The server reads the socket in chunks of up to 64 KiB: the floor hashes the same bytes so.
  const floors = { 'createHash sha-256': 'sha256', 'createHash sha-512': 'sha512' }
  const samples = await measureRounds('uploads', [...Object.keys(configs), ...Object.keys(floors)], async (name) => {
    if (name in floors) return { cpu: await hashAlone(floors[name], uploadMiB, 64 * KiB) }
    const [variant, { measured, warmup }] = configs[name]
    return withServer(variant, async (server) => {
      await upload(server.url, block, warmupBlocks, warmup)
      const before = await server.stats()
      const wall = await upload(server.url, block, uploadMiB, measured)
      const after = await server.stats()
      return { wall, cpu: after.cpu - before.cpu, user: after.user - before.user, maxRSS: after.maxRSS }
    })
  })
  return { bytes: uploadMiB * MiB, samples }
}

async function downloads () {
  const configs = { 'no Want-Repr-Digest': {}, 'Want-Repr-Digest sha-256': { 'want-repr-digest': 'sha-256=1' }, 'Want-Repr-Digest sha-512': { 'want-repr-digest': 'sha-512=1' } }
  // The server's stream pushes 1 MiB blocks, which is what the digest is updated with.
  const floors = { 'createHash sha-256': 'sha256', 'createHash sha-512': 'sha512' }
  const samples = await measureRounds('downloads', [...Object.keys(configs), ...Object.keys(floors)], async (name) => {
    if (name in floors) return { cpu: await hashAlone(floors[name], uploadMiB, MiB) }
    const headers = configs[name]
    return withServer('plugin', async (server) => {
      await download(server.url, 64, headers)
      const before = await server.stats()
      const { bytes, trailer } = await download(server.url, uploadMiB, headers)
      const after = await server.stats()
      if (bytes !== uploadMiB * MiB || (trailer !== undefined) !== ('want-repr-digest' in headers)) throw new Error(`download of ${bytes} bytes, trailer ${trailer}`)
      return { cpu: after.cpu - before.cpu }
    })
  })
  return { bytes: uploadMiB * MiB, samples }
}

// Static files: @fastify/static alone, and with the plugin sending the three digests of every file
// in the header section. A first request of a file hashes it (each server process starts with an
// empty cache, and requests every file once); later requests of one file find its digests kept.
async function staticFiles () {
  const fileBytes = 64 * KiB
  const count = 400
  const root = await mkdtemp(join(tmpdir(), 'bench-static-'))
  try {
    const paths = []
    for (let i = 0; i < count; i++) {
      await writeFile(join(root, `asset-${i}.js`), randomBytes(fileBytes / 2).toString('hex'))
      paths.push(`/static/asset-${i}.js`)
    }
    // The cache trusts a version 2 s after its last change (file-digests.ts): wait for the clock.
    const settledAt = Number((await stat(join(root, `asset-${count - 1}.js`))).ctimeMs) + 2100
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, settledAt - Date.now())))
    const configs = { '@fastify/static': 'static', '@fastify/static + staticFileDigests()': 'static-digests' }
    const samples = await measureRounds('static', Object.keys(configs), (name) => withServer(configs[name], async (server) => {
      const before = await server.stats()
      await getEach(server.url, paths, 8)
      const after = await server.stats()
      const first = (after.cpu - before.cpu) / count * 1e6
      const later = await requestsPerSecond({ server, method: 'GET', path: paths[0], headers: {}, connections: 50, pipelining: 1, warmup: 2, seconds })
      return { first, ...later }
    }, { ...process.env, BENCH_STATIC_ROOT: root }))
    return { fileBytes, count, samples }
  } finally {
    await rm(root, { recursive: true, force: true })
  }
}

// Resumable uploads: the running digest of an upload, hashed with hash-wasm so that its state can be
// saved between requests, against the plugin checking a Content-Digest with createHash, over one
// large upload (a creation with Upload-Complete: ?1 and its Repr-Digest); and the fixed cost of an
// append (its state loaded, its hash saved) in requests per second of small appends.
async function resumable () {
  const block = Buffer.alloc(MiB, 'resumable ')
  const resumableEnv = { ...process.env, BENCH_RESUMABLE: '1' }
  const warmupBlocks = 64
  const digest = (algorithm, blocks) => digestField(algorithm, Array(blocks).fill(block))
  const uploadsOf = (field, algorithm, path, extra = {}) => ({
    path,
    measured: { [field]: digest(algorithm, uploadMiB), ...extra },
    warmup: { [field]: digest(algorithm, warmupBlocks), ...extra }
  })
  const creation = { 'upload-complete': '?1' }
  const configs = {
    'no digest field': { path: '/upload', measured: {}, warmup: {} },
    'Content-Digest sha-256': uploadsOf('content-digest', 'sha-256', '/upload'),
    'resumable creation, Repr-Digest sha-256': uploadsOf('repr-digest', 'sha-256', '/resumable', creation),
    'Content-Digest sha-512': uploadsOf('content-digest', 'sha-512', '/upload'),
    'resumable creation, Repr-Digest sha-512': uploadsOf('repr-digest', 'sha-512', '/resumable', creation)
  }
  const floors = {
    'createHash sha-256': 'sha256',
    'hash-wasm sha-256': 'wasm-sha256',
    'createHash sha-512': 'sha512',
    'hash-wasm sha-512': 'wasm-sha512'
  }
  const appendBytes = 16 * KiB
  const appendBody = Buffer.alloc(appendBytes, 'append ')
  const appends = {
    '16 KiB PUT, Content-Digest sha-256': { method: 'PUT', path: '/upload', headers: { 'content-type': 'application/x-upload', 'content-digest': digestField('sha-256', [appendBody]) } },
    '16 KiB append, sha-256 running': {
      method: 'PATCH',
      path: '/resumable',
      headers: { 'content-type': 'application/partial-upload', 'upload-offset': '0', 'upload-complete': '?0', 'content-digest': digestField('sha-256', [appendBody]) }
    }
  }
  const names = [...Object.keys(configs), ...Object.keys(floors), ...Object.keys(appends)]
  const samples = await measureRounds('resumable', names, async (name) => {
    if (name in floors) return { cpu: await hashAlone(floors[name], uploadMiB, 64 * KiB) }
    if (name in appends) {
      return withServer('plugin', async (server) => {
        // A creation first, whose state at offset 0 every append then starts from.
        await upload(server.url, block, 1, { 'upload-complete': '?0', 'repr-digest': digest('sha-256', 1) }, '/resumable')
        return await requestsPerSecond({ server, ...appends[name], body: appendBody, connections: 50, pipelining: 1, warmup: 2, seconds })
      }, resumableEnv)
    }
    const { path, measured, warmup } = configs[name]
    return withServer('plugin', async (server) => {
      await upload(server.url, block, warmupBlocks, warmup, path)
      const before = await server.stats()
      const wall = await upload(server.url, block, uploadMiB, measured, path)
      const after = await server.stats()
      return { wall, cpu: after.cpu - before.cpu }
    }, resumableEnv)
  })
  return { bytes: uploadMiB * MiB, appendBytes, samples }
}

// The interceptor's cost in the client process (this one): both configurations send the server the
// same requests, the plain one with the Content-Digest the interceptor would add written in, and
// download with the same Want-Repr-Digest, which the interceptor checks in the trailer section.
async function client () {
  const body = smallJsonBody()
  const headers = { 'content-type': 'application/json' }
  const field = { 'content-digest': digestField('sha-256', [body]) }
  const configs = { undici: [false, field], 'undici + digestInterceptor': [true, {}] }
  const floors = { 'createHash sha-256': 'sha256' }
  const samples = await measureRounds('client', [...Object.keys(configs), ...Object.keys(floors)], async (name) => {
    if (name in floors) return { download: await hashAlone(floors[name], uploadMiB, 64 * KiB) }
    const [intercepted, digest] = configs[name]
    return withServer('plugin', async (server) => {
      const requests = await undiciRequests(server.url, intercepted, { ...headers, ...digest }, body, seconds)
      await undiciDownload(server.url, intercepted, 64)
      const { cpu } = await undiciDownload(server.url, intercepted, uploadMiB)
      return { ...requests, download: cpu }
    })
  })
  return { bytes: Buffer.byteLength(body), downloadBytes: uploadMiB * MiB, samples }
}

const started = new Date()
const results = {}
if (parts.includes('small')) results.small = await smallRequests(1)
if (parts.includes('pipelined')) results.pipelined = await smallRequests(10)
if (parts.includes('sweep')) results.sizes = await sweep()
if (parts.includes('uploads')) results.large = await uploads()
if (parts.includes('downloads')) results.downloads = await downloads()
if (parts.includes('static')) results.static = await staticFiles()
if (parts.includes('resumable')) results.resumable = await resumable()
if (parts.includes('client')) results.client = await client()

if (process.env.BENCH_ONLY) {
  for (const [part, result] of Object.entries(results)) log(`${part}: ${JSON.stringify(result)}`)
  // The sections as the full report writes them.
  if (results.small !== undefined) log(smallRequestsPart(results.small))
  if (results.pipelined !== undefined) log(smallRequestsPart(results.pipelined))
  if (results.large !== undefined) log(largeSection(results.large).text)
  if (results.client !== undefined) log(clientSection(results.client))
  if (results.static !== undefined) log(staticSection(results.static))
  if (results.resumable !== undefined) log(resumableSection(results.resumable))
} else {
  await writeReport({ started, settings: { rounds, seconds, uploadMiB, seed, pinned }, ...results })
}
