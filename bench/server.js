// One benchmark server in its own process: `node bench/server.js <variant>`. The variants:
// - bare: Fastify alone;
// - plugin: fastify-digest-fields;
// - raw-body: what a user writes by buffering, fastify-raw-body plus httpbis-digest-headers'
//   verifyContentDigest in a preHandler;
// - streaming: what a user writes with streams, a preParsing hook that pipes the payload through
//   createHash and fails at its end on a mismatch;
// - floor: the least code that keeps the plugin's guarantee for the common case (bench/floor.js);
// - floor-allocating: the floor allocating BENCH_BALLAST bytes more a request with a digest (1,200 by
//   default, what the plugin allocates more), to time what that allocation alone costs;
// - hashing: Fastify alone whose upload route hashes what it reads with createHash, the
//   algorithm of the request's Content-Digest, and compares at the end: the least a server does
//   to check an upload, with no guarantee to readers;
// - static: @fastify/static alone, serving BENCH_STATIC_ROOT under /static/;
// - static-digests: the same with the plugin and staticFileDigests().
// It reports its port, then its CPU time (and the user part of it) and peak RSS whenever asked, to
// the parent over IPC.
import { createHash, timingSafeEqual } from 'node:crypto'
import { readFile } from 'node:fs/promises'
import { Readable, Transform, Writable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import Fastify from 'fastify'
import fastifyRawBody from 'fastify-raw-body'
import { verifyContentDigest } from 'httpbis-digest-headers'

const variant = process.argv[2]
const app = Fastify({ bodyLimit: 2 * 1024 * 1024 * 1024 })
const mismatch = () => Object.assign(new Error('Mismatching Digest Value'), { statusCode: 400 })

if (variant === 'plugin') {
  // BENCH_PLUGIN=<path to a build's index.js> measures another build of the plugin (A/B tests).
  const { default: fastifyDigestFields } = await import(process.env.BENCH_PLUGIN ?? 'fastify-digest-fields')
  await app.register(fastifyDigestFields)
  // Only for the resumable part: a resumable route makes every request without digest fields look
  // for upload fields, which the other parts do not measure.
  if (process.env.BENCH_RESUMABLE === '1') resumableRoutes()
} else if (variant === 'raw-body') {
  await app.register(fastifyRawBody, { global: true, encoding: false, runFirst: true })
  app.addHook('preHandler', (request, reply, done) => {
    const header = request.headers['content-digest']
    if (header === undefined) return done()
    let verified = false
    try {
      verified = verifyContentDigest(request.rawBody ?? Buffer.alloc(0), header)
    } catch {}
    done(verified ? undefined : mismatch())
  })
} else if (variant === 'streaming') {
  app.addHook('preParsing', (request, _reply, payload, done) => {
    const expected = /^sha-256=:([A-Za-z0-9+/]+={0,2}):$/.exec(request.headers['content-digest'] ?? '')
    if (expected === null) return done(null, payload)
    const provided = Buffer.from(expected[1], 'base64')
    const hash = createHash('sha256')
    const verified = new Transform({
      transform (chunk, _encoding, callback) {
        hash.update(chunk)
        callback(null, chunk)
      },
      flush (callback) {
        const calculated = hash.digest()
        callback(provided.length === calculated.length && timingSafeEqual(provided, calculated) ? null : mismatch())
      }
    })
    payload.on('error', (error) => verified.destroy(error))
    done(null, payload.pipe(verified))
  })
} else if (variant === 'floor' || variant === 'floor-allocating') {
  const { floor } = await import('./floor.js')
  floor(app, { ballast: variant === 'floor' ? 0 : Number(process.env.BENCH_BALLAST ?? 1200) })
} else if (variant === 'static' || variant === 'static-digests') {
  const { default: fastifyStatic } = await import('@fastify/static')
  const options = { root: process.env.BENCH_STATIC_ROOT, prefix: '/static/' }
  if (variant === 'static-digests') {
    const { default: fastifyDigestFields, staticFileDigests } = await import(process.env.BENCH_PLUGIN ?? 'fastify-digest-fields')
    await app.register(fastifyDigestFields)
    options.setHeaders = staticFileDigests()
  }
  await app.register(fastifyStatic, options)
} else if (variant !== 'bare' && variant !== 'hashing') {
  throw new Error(`unknown variant ${variant}`)
}

app.addContentTypeParser('application/octet-stream', { parseAs: 'buffer' }, (_request, body, done) => done(null, body))
if (variant === 'raw-body') {
  // fastify-raw-body collects request.raw beside the parser, so a streaming route would race it:
  // checking after the fact needs the whole body anyway, and buffering it is what users write.
  app.addContentTypeParser('application/x-upload', { parseAs: 'buffer' }, (_request, body, done) => done(null, body))
} else {
  app.addContentTypeParser('application/x-upload', (_request, payload, done) => done(null, payload))
}

// Handlers that read the body, as real ones would.
app.post('/json', async (request) => ({ received: Object.keys(request.body).length }))
app.post('/bytes', async (request) => ({ received: request.body.length }))
app.put('/upload', async (request) => {
  if (Buffer.isBuffer(request.body)) return { received: request.body.length }
  const expected = variant === 'hashing' ? /^sha-(256|512)=:(.+):$/.exec(request.headers['content-digest'] ?? '') : null
  const hash = expected === null ? null : createHash(`sha${expected[1]}`)
  let received = 0
  let chunks = 0
  await pipeline(request.body, new Writable({
    write (chunk, _encoding, callback) {
      hash?.update(chunk)
      received += chunk.length
      chunks++
      callback()
    }
  }))
  if (hash !== null && !hash.digest().equals(Buffer.from(expected[2], 'base64'))) throw mismatch()
  // How many chunks the bytes came in: the createHash floor hashes the same bytes in chunks of that size.
  return { received, chunks }
})

// A streamed download of ?mib= MiB, for response digests: answered with Repr-Digest in the trailer
// section when the request asks for it.
const block = Buffer.alloc(1024 * 1024, 'download ')
app.get('/download', async (request, reply) => {
  const mib = Number(request.query.mib ?? 1)
  let sent = 0
  const stream = new Readable({
    read () { this.push(sent++ < mib ? block : null) }
  })
  return reply.type('application/octet-stream').send(stream)
})

// Resumable uploads: PUT /resumable takes a creation (Upload-Complete: ?1, its Repr-Digest compared
// with the running hash); PATCH /resumable appends at offset 0 of one stored upload, again and again,
// so that every append loads the state, hashes and saves.
function resumableRoutes () {
  let stored = null
  const loadState = () => stored
  const read = async (request) => {
    let received = 0
    for await (const chunk of request.body) received += chunk.length
    return received
  }
  app.put('/resumable', { config: { digest: { resumable: { creation: true } } } }, async (request) => {
    // The state at offset 0, with the creation's Repr-Digest, for the appends to start from.
    stored ??= request.resumableUpload.state()
    return { received: await read(request) }
  })
  app.patch('/resumable', { config: { digest: { resumable: { loadState } } } }, async (request) => ({ received: await read(request) }))
  app.addContentTypeParser('application/partial-upload', (_request, payload, done) => done(null, payload))
}

// Peak RSS of this process: VmHWM, since getrusage's maxRSS keeps the parent's peak across exec.
async function peakRSS () {
  const status = await readFile('/proc/self/status', 'utf8').catch(() => '')
  const kB = /^VmHWM:\s+(\d+) kB/m.exec(status)?.[1]
  return kB === undefined ? process.resourceUsage().maxRSS * 1024 : Number(kB) * 1024
}

await app.listen({ host: '127.0.0.1', port: 0 })
process.on('message', async (message) => {
  if (message === 'stats') {
    const { user, system } = process.cpuUsage()
    process.send({ cpu: (user + system) / 1e6, user: user / 1e6, maxRSS: await peakRSS() })
  }
})
process.send({ port: app.server.address().port })
// A normal exit on SIGTERM, so that a server started with --cpu-prof writes its profile.
process.on('SIGTERM', () => process.exit(0))
