import { EventEmitter, once } from 'node:events'
import { readFileSync } from 'node:fs'
import { connect, type Socket } from 'node:net'
import { Writable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import Fastify, { type FastifyRequest } from 'fastify'
import t from 'tap'
import fastifyDigestFields from '../../lib/index.js'
import { fuzzSeed, listen, member, problemTypes, randomChunks, rawRequest, seededBytes, seededRandom, watchProcess } from '../helpers.js'

// "Per-connection resources are bounded by a constant you state, whatever a stalled client holds."
// Thousands of clients open an upload, send its head and 3 bytes of content, then nothing: what
// does each connection hold in the server while it stalls? Before the fix, every running resumable
// creation had its own hash-wasm WebAssembly instance per algorithm, each reserving about 10 GiB of
// address space: 2,000 stalled creations with four algorithms took 80 TiB of it (a process has
// 128 TiB), and each held over 500 KiB of heap and buffers. The plugin now keeps one instance per
// algorithm for the whole process, and each upload a saved state of 96 to 212 bytes per algorithm.
//
// Clients and server are one process, so the resident figures count both ends of every connection.
// stallTimeout is far beyond the test, so that the plugin ends none of them: the point is what a
// stalled connection holds, not when it is ended. A control connection, on a route the plugin does
// not cover, gives what Node and Fastify hold themselves.

t.comment(`seed ${fuzzSeed} (DIGEST_FUZZ_SEED replays it)`)

setFlagsFromString('--expose-gc')
const gc = runInNewContext('gc') as () => void

const KiB = 1024
const GiB = 1024 ** 3

// The bounds, each about twice the highest figure measured on the 2-core development machine with
// Node 20, 22, 24 and 26 (three runs each, 4,000 connections):
//
// - Address space: the four instances the process keeps (most of the 34 to 42 GiB of VmSize
//   before) are made before the first figure. The stalled connections then added 0.09 to 0.19 GiB
//   (V8's heap), where one instance per upload adds 10 GiB each. 64 GiB is six instances' worth,
//   for all the connections together. Per-upload instances added about 64,000 GiB with Node 24,
//   80,000 with Node 20.
// - What the plugin holds per stalled connection beyond a control: its JavaScript objects and the
//   buffers V8 counts (heapUsed + external after full collections), which are exact where the
//   resident set is not. Measured 6.3 to 7.4 KiB for a resumable creation with four running hashes
//   (up to 9 KiB when the kinds take turns otherwise: the attribution moves by a few KiB), and 0.1
//   to 4.3 KiB for an upload with Content-Digest; bound 16 KiB. Per-upload instances measured 536
//   to 540 KiB.
// - Resident memory per stalled connection, both ends, Node and Fastify included: 17 to 34 KiB for
//   a control, 26 to 56 KiB for a resumable creation (the most with Node 24), 15 to 28 KiB for an
//   upload with Content-Digest; bound 112 KiB. The figure moves with V8's heap sizing (pages the
//   collector keeps, which no connection holds) more than with what a connection holds, so the
//   bound is loose: per-upload instances measured 69 to 93 KiB with Node 20 and 24, and the two
//   bounds above are the ones that catch them.
const addressSpaceBound = 64 * GiB
const pluginBound = 16 * KiB
const residentBound = 112 * KiB

const algorithms = ['sha-256', 'sha-512', 'md5', 'sha'] as const

/** A figure of /proc/self/status, in bytes. */
function statusBytes (name: 'VmSize' | 'VmRSS'): number {
  const line = readFileSync('/proc/self/status', 'latin1').split('\n').find((one) => one.startsWith(`${name}:`))
  return Number(/(\d+) kB/.exec(String(line))?.[1]) * KiB
}

/** The soft limit of open files, from /proc/self/limits (Infinity when unlimited). */
function openFilesLimit (): number {
  const line = readFileSync('/proc/self/limits', 'latin1').split('\n').find((one) => one.startsWith('Max open files')) ?? ''
  const soft = line.slice('Max open files'.length).trim().split(/\s+/)[0]
  return soft === 'unlimited' ? Infinity : Number(soft)
}

/** Address space, resident set, and what the JavaScript heap and the buffers V8 counts hold. */
interface Memory { vmSize: number, rss: number, held: number }

function measure (): Memory {
  gc()
  gc()
  const { heapUsed, external } = process.memoryUsage()
  return { vmSize: statusBytes('VmSize'), rss: statusBytes('VmRSS'), held: heapUsed + external }
}

/** A count the test can wait on: resolves once it reaches `at`, woken by each increment. */
class Count extends EventEmitter {
  value = 0

  add (by = 1): void {
    this.value += by
    this.emit('added')
  }

  async reach (at: number): Promise<void> {
    while (this.value < at) await once(this, 'added')
  }
}

const kib = (bytes: number): string => `${(bytes / KiB).toFixed(1)} KiB`
const mib = (bytes: number): string => `${(bytes / 2 ** 20).toFixed(1)} MiB`
const gib = (bytes: number): string => `${(bytes / GiB).toFixed(2)} GiB`

// Each connection takes a descriptor at both ends: a lower limit than this machine's gets fewer.
const limit = process.platform === 'linux' ? openFilesLimit() : 0
const room = Math.floor((limit - 256) / 2)
const wanted = { control: 1000, creation: 2000, plain: 1000 }
const scale = Math.min(1, room / (wanted.control + wanted.creation + wanted.plain))
const counts = { control: Math.floor(wanted.control * scale), creation: Math.floor(wanted.creation * scale), plain: Math.floor(wanted.plain * scale) }

t.test(`${counts.creation} stalled resumable creations and ${counts.plain} stalled uploads hold a bounded amount each, and the server still answers`, {
  skip: process.platform !== 'linux' ? 'reads /proc/self' : counts.plain < 50 ? `only ${limit} open files` : false,
  timeout: 90_000
}, async (t) => {
  if (scale < 1) t.comment(`the open files limit, ${limit}, leaves room for ${room} connections, not ${wanted.control + wanted.creation + wanted.plain}`)
  const escaped = watchProcess(t)
  const app = Fastify()
  await app.register(fastifyDigestFields, { algorithms: [...algorithms], stallTimeout: 600_000 })
  app.addContentTypeParser('application/octet-stream', (_request, _payload, done) => done(null))

  const entered = { control: new Count(), creation: new Count(), plain: new Count() }
  const received = { control: new Count(), creation: new Count(), plain: new Count() }
  const settled = new Count()
  let creationState = ''
  /** Reads the content into nothing, as an upload that keeps nothing would. */
  async function discard (request: FastifyRequest, kind: keyof typeof entered): Promise<void> {
    entered[kind].add()
    try {
      await pipeline(request.raw, new Writable({ write: (chunk: Buffer, _encoding, callback) => { received[kind].add(chunk.length); callback() } }))
    } finally {
      settled.add()
    }
  }
  app.post('/uploads', { config: { digest: { resumable: { creation: true } } } }, async (request, reply) => {
    const upload = request.resumableUpload
    if (upload === null) return await reply.code(400).send()
    await discard(request, 'creation')
    creationState = upload.state()
    return await reply.code(201).header('upload-complete', upload.complete ? '?1' : '?0').send()
  })
  app.put('/plain', async (request, reply) => {
    await discard(request, 'plain')
    return await reply.code(204).send()
  })
  app.get('/plain', async () => 'still here')
  app.put('/control', { config: { digest: false } }, async (request, reply) => {
    await discard(request, 'control')
    return await reply.code(204).send()
  })
  const sockets: Socket[] = []
  // A failure before the clients leave: app.close() waits for every request in flight.
  t.teardown(async () => {
    for (const socket of sockets) socket.destroy()
    await app.close()
  })
  const port = await listen(app)

  const random = seededRandom(fuzzSeed)
  // What a stalled upload announces: a million bytes, of which it sends 3.
  const announced = seededBytes(1_000_000, fuzzSeed)
  const heads = {
    control: ['PUT /control HTTP/1.1'],
    creation: ['POST /uploads HTTP/1.1', 'Upload-Complete: ?0', `Repr-Digest: ${algorithms.map((key) => member(key, announced)).join(', ')}`],
    plain: ['PUT /plain HTTP/1.1', `Content-Digest: ${member('sha-256', announced)}`]
  }

  /** A fresh creation that completes its upload with its own content, sent in random chunks. */
  async function completeUpload (size: number, flip: boolean): Promise<{ status: number, headers: Record<string, string>, body: string }> {
    const data = seededBytes(size, fuzzSeed + size)
    const sent = Buffer.from(data)
    const at = Math.floor(random() * size)
    if (flip) sent[at] = (sent[at] as number) ^ 1
    return await rawRequest(port, [
      'POST /uploads HTTP/1.1', 'Host: localhost', 'Content-Type: application/octet-stream', `Content-Length: ${size}`,
      'Upload-Complete: ?1', `Repr-Digest: ${algorithms.map((key) => member(key, data)).join(', ')}`
    ], randomChunks(sent, 16 * KiB, random))
  }

  async function checkAnswers (when: string): Promise<void> {
    const good = await completeUpload(100_000 + Math.floor(random() * 100_000), false)
    t.same([good.status, good.headers['upload-complete']], [201, '?1'], `${when}: a fresh creation that completes its upload gets its 201`)
    const bad = await completeUpload(100_000 + Math.floor(random() * 100_000), true)
    t.same([bad.status, JSON.parse(bad.body).type], [400, `${problemTypes}digest-mismatching-value`],
      `${when}: one with a byte flipped gets the mismatch problem`)
    const plain = await rawRequest(port, ['GET /plain HTTP/1.1', 'Host: localhost'])
    t.same([plain.status, plain.body], [200, 'still here'], `${when}: a GET on a plain route answers`)
  }

  // Warm up: the plugin's four hash-wasm instances, and every code path, before the first figure.
  await checkAnswers('before any stall')
  const before = measure()

  const unexpected: string[] = []
  let closing = false
  /**
   * Opens `count` connections of a kind that send its head and 3 bytes of content, then nothing, in
   * batches that wait for the server to be in each request's handler (no batch overflows the listen
   * backlog) and, where the plugin does not hold them back, for its 3 bytes to have reached it
   * (through the running hashes of a creation): then every connection is stalled where it will stay.
   */
  async function stall (kind: keyof typeof heads, count: number): Promise<void> {
    const head = [...heads[kind], 'Host: localhost', 'Content-Type: application/octet-stream', `Content-Length: ${announced.length}`, '', '']
    const request = Buffer.concat([Buffer.from(head.join('\r\n'), 'latin1'), announced.subarray(0, 3)])
    const start = { entered: entered[kind].value, received: received[kind].value }
    for (let opened = 0; opened < count;) {
      const batch = Math.min(250, count - opened)
      for (let i = 0; i < batch; i++) {
        const socket = connect({ host: '127.0.0.1', port })
        socket.once('connect', () => socket.write(request))
        socket.on('data', (data) => unexpected.push(`answered: ${String(data).split('\r\n', 1)[0]}`))
        socket.on('error', (error) => unexpected.push(`error: ${error.message}`))
        socket.on('close', () => { if (!closing) unexpected.push('closed') })
        sockets.push(socket)
      }
      opened += batch
      await entered[kind].reach(start.entered + opened)
      // The last kilobyte of content with Content-Digest waits for its verdict.
      if (kind !== 'plain') await received[kind].reach(start.received + 3 * opened)
    }
  }

  // The kinds take turns, half of each at a time, so that the steps by which V8 grows its heap
  // (which the resident set shows, and which no connection holds) fall on every kind alike.
  const kinds = (['control', 'creation', 'plain'] as const).map((kind) => ({ kind, count: counts[kind], rss: 0, held: 0 }))
  const rounds = 2
  const started = performance.now()
  let last = before
  for (let round = 0; round < rounds; round++) {
    for (const kind of kinds) {
      await stall(kind.kind, Math.floor(kind.count * (round + 1) / rounds) - Math.floor(kind.count * round / rounds))
      const now = measure()
      kind.rss += now.rss - last.rss
      kind.held += now.held - last.held
      last = now
    }
  }
  const opening = performance.now() - started
  type Each = Omit<Memory, 'vmSize'>
  const [control, creation, plain] = kinds.map(({ count, rss, held }) => ({ rss: rss / count, held: held / count })) as [Each, Each, Each]
  const addressSpace = last.vmSize - before.vmSize

  t.comment(`opened ${sockets.length} stalled connections in ${(opening / 1000).toFixed(1)} s (Node ${process.version})`)
  t.comment(`VmSize ${gib(before.vmSize)} before, ${gib(last.vmSize)} with every connection stalled: ${gib(addressSpace)} more`)
  t.comment(`VmRSS ${mib(before.rss)} before, ${mib(last.rss)} with every connection stalled`)
  t.comment(`a stalled control: ${kib(control.rss)} resident, ${kib(control.held)} heap and buffers`)
  t.comment(`a stalled resumable creation: ${kib(creation.rss)} resident, ${kib(creation.held)} heap and buffers, ${kib(creation.held - control.held)} more than a control`)
  t.comment(`a stalled upload with Content-Digest: ${kib(plain.rss)} resident, ${kib(plain.held)} heap and buffers, ${kib(plain.held - control.held)} more than a control`)
  t.comment(`the state of a completed creation with ${algorithms.length} algorithms is ${creationState.length} bytes`)

  t.same(unexpected, [], 'the server neither answered nor closed any stalled connection')
  t.ok(addressSpace < addressSpaceBound, `address space grew ${gib(addressSpace)} for ${sockets.length} connections, under ${gib(addressSpaceBound)}`)
  for (const [name, memory] of [['resumable creation', creation], ['upload with Content-Digest', plain]] as const) {
    t.ok(memory.held - control.held < pluginBound, `the plugin holds ${kib(memory.held - control.held)} of heap and buffers for a stalled ${name}, under ${kib(pluginBound)}`)
    t.ok(memory.rss < residentBound, `a stalled ${name} takes ${kib(memory.rss)} resident, under ${kib(residentBound)}`)
  }

  await checkAnswers(`with ${sockets.length} connections stalled`)
  const entries = (): number => entered.control.value + entered.creation.value + entered.plain.value
  t.equal(entries() - settled.value, sockets.length, 'every stalled handler is still reading')

  // Every client leaves: each stalled handler's read fails, and the server answers as before.
  closing = true
  for (const socket of sockets) socket.destroy()
  await settled.reach(entries())
  t.comment(`VmRSS ${mib(measure().rss)} once every client left`)
  await checkAnswers('once every stalled client left')
  const connections = await new Promise<number>((resolve, reject) =>
    app.server.getConnections((error, count) => error === null ? resolve(count) : reject(error)))
  t.equal(connections, 0, 'the server holds no connection')
  t.same(escaped, [], 'no unhandled rejection nor uncaught exception')
})
