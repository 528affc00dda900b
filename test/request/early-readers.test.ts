import { createHash } from 'node:crypto'
import { Readable, Writable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { deflateSync } from 'node:zlib'
import t from 'tap'
import Fastify from 'fastify'
import fastifyCompress from '@fastify/compress'
import fastifyMultipart from '@fastify/multipart'
import fastifyDigestFields from '../../lib/index.js'
import { listen, problemTypes, rawRequest } from '../helpers.js'

// Readers that know where their own content ends can end before the request's content does: a
// multipart part followed by an epilogue, a compressed stream followed by more bytes. Holding back
// the last kilobyte cannot stop that, so the reply that follows waits for the verdict, and a
// failure turns it into the problem. Found by an independent attack on the source verification.

const sha256 = (data: string | Buffer): string => `sha-256=:${createHash('sha256').update(data).digest('base64')}:`

t.test('a multipart file followed by an epilogue: the reply on it becomes the problem when the digest fails', async (t) => {
  const app = Fastify()
  await app.register(fastifyDigestFields)
  await app.register(fastifyMultipart)
  // The handler may read the whole part before the request's content ends: act on parts only once
  // request.digest is set. What this pins is that its reply does not claim the content was taken.
  app.post('/upload', async (request) => {
    const file = await request.file()
    const chunks: Buffer[] = []
    for await (const chunk of file?.file ?? []) chunks.push(chunk as Buffer)
    return { stored: Buffer.concat(chunks).toString(), digest: request.digest?.fields ?? null }
  })
  const port = await listen(app)
  t.teardown(() => app.close())
  const body = (content: string): Buffer => Buffer.from(
    '--B\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\nContent-Type: text/plain\r\n\r\n' +
    content + '\r\n--B--\r\n' + 'x'.repeat(4000))
  const send = (content: string, digest: string) => {
    const data = body(content)
    const split = data.length - 2000
    return rawRequest(port, ['POST /upload HTTP/1.1', 'Host: localhost', 'Content-Type: multipart/form-data; boundary=B', `Content-Length: ${data.length}`, `Content-Digest: ${digest}`],
      [data.subarray(0, split), data.subarray(split)])
  }
  const right = await send('FILE CONTENT', sha256(body('FILE CONTENT')))
  t.equal(right.status, 200)
  t.same(JSON.parse(right.body), { stored: 'FILE CONTENT', digest: ['content-digest'] }, 'the reply went once the content was verified')
  const wrong = await send('TAMPERED CONTENT', sha256(body('FILE CONTENT')))
  t.equal(wrong.status, 400)
  t.equal(JSON.parse(wrong.body).type, problemTypes + 'digest-mismatching-value')
})

t.test('a compressed stream followed by more bytes: the reply on it becomes the problem when the digest fails', async (t) => {
  const app = Fastify()
  await app.register(fastifyDigestFields)
  await app.register(fastifyCompress)
  app.addContentTypeParser('*', (_request, payload, done) => done(null, payload))
  app.put('/files', async (request, reply) => {
    await pipeline(request.body as NodeJS.ReadableStream, new Writable({ write (_chunk, _encoding, callback) { callback() } }))
    return reply.code(201).send({ stored: true })
  })
  const port = await listen(app)
  t.teardown(() => app.close())
  const compressed = deflateSync('CONTENT')
  const padding = Buffer.alloc(1500, 0x20)
  const pieces = [compressed, padding, padding, padding]
  const content = Buffer.concat(pieces)
  // The bytes after the compressed stream are sent only once the handler has replied.
  const send = (digest: string) => rawRequest(port, ['PUT /files HTTP/1.1', 'Host: localhost', 'Content-Type: application/octet-stream', 'Content-Encoding: deflate',
    `Content-Length: ${content.length}`, `Content-Digest: ${digest}`], pieces)
  t.equal((await send(sha256(content))).status, 201)
  const wrong = await send(sha256('what the client really sent'))
  t.equal(wrong.status, 400)
  t.equal(JSON.parse(wrong.body).type, problemTypes + 'digest-mismatching-value')
})

t.test('a parser that sniffs with a readable listener and calls done does not stall the rest', async (t) => {
  // Before, the plugin's resume() could not move a stream with a 'readable' listener, and a
  // request with the right digest and a body larger than the buffer never got an answer.
  const app = Fastify()
  await app.register(fastifyDigestFields)
  app.addContentTypeParser('application/octet-stream', (_request, payload, done) => {
    let sniffed = false
    payload.on('readable', () => {
      const head = sniffed ? null : payload.read(4) as Buffer | null
      if (head === null) return
      sniffed = true
      done(null, { magic: head.toString('latin1') })
    })
  })
  app.post('/sniff', async (request) => request.body)
  const port = await listen(app)
  t.teardown(() => app.close())
  const body = Buffer.alloc(200_000, 0x41)
  body.write('PK\x03\x04', 'latin1')
  const send = (digest: string) => rawRequest(port, ['POST /sniff HTTP/1.1', 'Host: localhost', 'Content-Type: application/octet-stream',
    `Content-Length: ${body.length}`, `Content-Digest: ${digest}`], [body.subarray(0, 100_000), body.subarray(100_000)])
  const right = await send(sha256(body))
  t.equal(right.status, 200)
  t.same(JSON.parse(right.body), { magic: 'PK\x03\x04' })
  t.equal((await send(sha256('other'))).status, 400)
})

t.test('inject() with a stream payload and no Content-Length is verified, not taken for empty content', async (t) => {
  // Before, a request without Content-Length or Transfer-Encoding was taken for empty content, and
  // inject() streamed any bytes under the digest of nothing.
  const app = Fastify()
  await app.register(fastifyDigestFields)
  app.addContentTypeParser('application/octet-stream', { parseAs: 'buffer' }, (_request, body, done) => done(null, body))
  app.put('/', async (request) => ({ length: (request.body as Buffer).length }))
  const send = (digest: string) => app.inject({
    method: 'PUT', url: '/', payload: Readable.from([Buffer.from('TAMPERED '), Buffer.from('UPLOAD')]), headers: { 'content-type': 'application/octet-stream', 'content-digest': digest }
  })
  t.equal((await send(sha256(''))).statusCode, 400, 'the digest of empty content does not pass other bytes')
  const right = await send(sha256('TAMPERED UPLOAD'))
  t.equal(right.statusCode, 200)
  t.same(right.json(), { length: 15 })
})

t.test('a success reply sent before anyone read the content waits for its verdict', async (t) => {
  // The handler answers at once and reads nothing: the content is read after it, and a failure
  // turns the 202 into the problem. An error answer goes as it is.
  const app = Fastify()
  await app.register(fastifyDigestFields)
  app.addContentTypeParser('application/octet-stream', (_request, _payload, done) => done(null))
  app.put('/accepted', async (_request, reply) => reply.code(202).send({ accepted: true }))
  app.put('/refused', async (_request, reply) => reply.code(409).send({ refused: true }))
  const send = (url: string, digest: string) => app.inject({ method: 'PUT', url, payload: 'content', headers: { 'content-type': 'application/octet-stream', 'content-digest': digest } })
  const right = await send('/accepted', sha256('content'))
  t.equal(right.statusCode, 202)
  t.same(right.json(), { accepted: true })
  const wrong = await send('/accepted', sha256('other'))
  t.equal(wrong.statusCode, 400)
  t.equal(wrong.headers['content-type'], 'application/problem+json')
  t.equal(wrong.json().type, problemTypes + 'digest-mismatching-value')
  t.equal((await send('/refused', sha256('other'))).statusCode, 409)
})
