// One benchmark server in its own process: `node bench/server.js <variant>`, where the variant is
// bare (Fastify alone), plugin (fastify-digest-fields) or handwritten (fastify-raw-body plus
// httpbis-digest-headers' verifyContentDigest in a preHandler, what a user would write without
// the plugin). It reports its port, CPU time and peak RSS to the parent over IPC.
import { readFile } from 'node:fs/promises'
import { Readable, Writable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import Fastify from 'fastify'
import fastifyRawBody from 'fastify-raw-body'
import { verifyContentDigest } from 'httpbis-digest-headers'
import fastifyDigestFields from '../dist/index.js'

const variant = process.argv[2]
const app = Fastify({ bodyLimit: 2 * 1024 * 1024 * 1024 })

if (variant === 'plugin') {
  await app.register(fastifyDigestFields)
} else if (variant === 'handwritten') {
  await app.register(fastifyRawBody, { global: true, encoding: false, runFirst: true })
  app.addHook('preHandler', (request, reply, done) => {
    const header = request.headers['content-digest']
    if (header === undefined) return done()
    let verified = false
    try {
      verified = verifyContentDigest(request.rawBody ?? Buffer.alloc(0), header)
    } catch {}
    if (verified) return done()
    reply.code(400).type('application/problem+json').send({ title: 'Mismatching Digest Value' })
  })
} else if (variant !== 'bare') {
  throw new Error(`unknown variant ${variant}`)
}

app.addContentTypeParser('application/octet-stream', { parseAs: 'buffer' }, (_request, body, done) => done(null, body))
if (variant === 'handwritten') {
  // fastify-raw-body collects request.raw beside the parser, so a streaming route would race it:
  // verifying after the fact needs the whole body anyway, and buffering it is what users write.
  app.addContentTypeParser('application/x-upload', { parseAs: 'buffer' }, (_request, body, done) => done(null, body))
} else {
  app.addContentTypeParser('application/x-upload', (_request, payload, done) => done(null, payload))
}

// A handler that reads the body, as a real one would.
app.post('/json', async (request) => ({ received: Object.keys(request.body).length }))
app.post('/bytes', async (request) => ({ received: request.body.length }))
app.put('/upload', async (request) => {
  if (Buffer.isBuffer(request.body)) return { received: request.body.length }
  let received = 0
  await pipeline(request.body, new Writable({
    write (chunk, _encoding, callback) {
      received += chunk.length
      callback()
    }
  }))
  return { received }
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

// Peak RSS of this process: VmHWM, since getrusage's maxRSS keeps the parent's peak across exec.
async function peakRSS () {
  try {
    const status = await readFile('/proc/self/status', 'utf8')
    return Number(status.match(/^VmHWM:\s+(\d+) kB/m)[1]) * 1024
  } catch {
    return process.resourceUsage().maxRSS * 1024
  }
}

await app.listen({ host: '127.0.0.1', port: 0 })
process.on('message', async (message) => {
  if (message === 'stats') {
    const { user, system } = process.cpuUsage()
    process.send({ cpu: (user + system) / 1e6, maxRSS: await peakRSS() })
  }
})
process.send({ port: app.server.address().port })
// A normal exit on SIGTERM, so that a server started with --cpu-prof writes its profile.
process.on('SIGTERM', () => process.exit(0))
