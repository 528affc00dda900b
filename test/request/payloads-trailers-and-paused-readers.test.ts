import { createHash } from 'node:crypto'
import { Readable } from 'node:stream'
import * as zlib from 'node:zlib'
import t from 'tap'
import Fastify from 'fastify'
import fastifyCompress from '@fastify/compress'
import { request } from 'undici'
import fastifyDigestFields from '../../lib/index.js'
import { hello, helloSha256, listen, member, rawRequest, watchProcess } from '../helpers.js'

// Regressions in response payloads (204 streams, web streams, supplied digests under compression),
// trailer fields nothing announced, layered codings and paused readers: each test is named after
// the failure it pins.

const sha256 = (data: string | Buffer): string => `sha-256=:${createHash('sha256').update(data).digest('base64')}:`
const empty = sha256('')

t.test('a 204 with a stream payload and Want-* no longer crashes the process: the digest of empty content', async (t) => {
  const escaped = watchProcess(t)
  const app = Fastify()
  await app.register(fastifyDigestFields, { responseDigests: ['content-digest'] })
  app.delete('/stream', async (_request, reply) => reply.code(204).send(Readable.from(['dropped'])))
  app.delete('/body', async (_request, reply) => reply.code(204).send('dropped'))
  const port = await listen(app)
  t.teardown(() => app.close())
  for (const path of ['/stream', '/body']) {
    const response = await request(`http://127.0.0.1:${port}${path}`, { method: 'DELETE', headers: { 'want-repr-digest': 'sha-256=1' } })
    t.equal(response.statusCode, 204)
    t.equal(response.headers['content-digest'], empty, `${path}: Content-Digest of the empty content sent`)
    t.equal(response.headers['repr-digest'], empty)
    await response.body.dump()
  }
  t.same(escaped, [])
})

t.test('a web stream or a Response payload gets no digest rather than a 500', async (t) => {
  const app = Fastify()
  await app.register(fastifyDigestFields)
  app.get('/web', async (_request, reply) => reply.send(new ReadableStream({ start (controller) { controller.enqueue(new TextEncoder().encode('hello')); controller.close() } })))
  app.get('/response', async (_request, reply) => reply.send(new Response('hello')))
  for (const url of ['/web', '/response']) {
    const response = await app.inject({ method: 'GET', url, headers: { 'want-content-digest': 'sha-256=1' } })
    t.equal(response.statusCode, 200, url)
    t.equal(response.body, 'hello')
    t.notOk('content-digest' in response.headers)
  }
})

t.test('an unannounced trailer field is refused also when the header section has Want-* or Trailer fields', async (t) => {
  const app = Fastify()
  await app.register(fastifyDigestFields)
  app.post('/', async (request) => request.body)
  const port = await listen(app)
  t.teardown(() => app.close())
  const chunked = [Buffer.from(`${hello.length.toString(16)}\r\n${hello}\r\n`), Buffer.from(`0\r\nContent-Digest: ${member('sha-256', 'forged')}\r\n\r\n`)]
  for (const extra of ['Want-Content-Digest: sha-256=1', 'Want-Repr-Digest: sha-512=1', 'Trailer: X-Other']) {
    const response = await rawRequest(port, ['POST / HTTP/1.1', 'Host: localhost', 'Content-Type: application/json', 'Transfer-Encoding: chunked', extra], chunked)
    t.equal(response.status, 400, extra)
    t.match(JSON.parse(response.body).detail, /trailer section .* cannot be verified/)
  }
})

t.test('an Unencoded-Digest in the trailer section of coded content is refused unless it was announced', async (t) => {
  const app = Fastify()
  await app.register(fastifyDigestFields)
  app.addContentTypeParser('application/octet-stream', { parseAs: 'buffer' }, (_request, body, done) => done(null, body))
  app.post('/', async (request) => ({ fields: request.digest?.fields ?? null }))
  const port = await listen(app)
  t.teardown(() => app.close())
  const encoded = zlib.gzipSync(hello)
  const send = (announce: string, digest: string) => rawRequest(port, ['POST / HTTP/1.1', 'Host: localhost', 'Content-Type: application/octet-stream', 'Content-Encoding: gzip',
    'Transfer-Encoding: chunked', `Trailer: ${announce}`], [Buffer.concat([Buffer.from(`${encoded.length.toString(16)}\r\n`), encoded, Buffer.from('\r\n')]),
    Buffer.from(`0\r\nUnencoded-Digest: ${digest}\r\n\r\n`)])
  const ofCoded = await send('Content-Digest', sha256(encoded))
  t.equal(ofCoded.status, 400, 'the digest of the coded bytes is not taken for the unencoded one')
  t.match(JSON.parse(ofCoded.body).detail, /Unencoded-Digest in the trailer section cannot be verified/)
  t.same(JSON.parse((await send('Unencoded-Digest', helloSha256)).body), { fields: ['unencoded-digest'] })
})

t.test('layered codings are bounded at every stage, and their number is capped', async (t) => {
  const app = Fastify({ bodyLimit: 1024 * 1024 })
  await app.register(fastifyDigestFields)
  app.addContentTypeParser('application/octet-stream', { parseAs: 'buffer' }, (_request, body, done) => done(null, body))
  app.post('/', async () => 'ok')
  // The deflate stream ends after 5 bytes; the 8 MiB of zeros after it are decoded by gunzip alone.
  const layered = zlib.gzipSync(Buffer.concat([zlib.deflateSync('hello'), Buffer.alloc(8 * 1024 * 1024)]))
  const bomb = await app.inject({ method: 'POST', url: '/', payload: layered, headers: { 'content-type': 'application/octet-stream', 'content-encoding': 'deflate, gzip', 'unencoded-digest': sha256('hello') } })
  t.equal(bomb.statusCode, 413)
  const many = await app.inject({ method: 'POST', url: '/', payload: hello, headers: { 'content-type': 'application/octet-stream', 'content-encoding': Array(5).fill('gzip').join(', '), 'unencoded-digest': helloSha256 } })
  t.equal(many.statusCode, 400)
  t.equal(many.json().detail, 'Unencoded-Digest cannot be verified: this server removes at most 4 content codings')
})

t.test('a success reply while a reader holds the request paused gets its verdict instead of hanging', async (t) => {
  const app = Fastify()
  await app.register(fastifyDigestFields)
  app.addContentTypeParser('application/x-sniff', (_request, payload, done) => done(null, payload))
  app.post('/data', async (request, reply) => {
    const body = request.body as Readable
    const first = await new Promise<Buffer>((resolve) => body.on('data', (chunk: Buffer) => { body.pause(); resolve(chunk) }))
    return reply.code(202).send({ magic: first.subarray(0, 4).toString() })
  })
  app.post('/readable', async (request, reply) => {
    const body = request.body as Readable
    const first = await new Promise<Buffer>((resolve) => body.on('readable', () => { const head = body.read(4) as Buffer | null; if (head !== null) resolve(head) }))
    return reply.code(202).send({ magic: first.toString() })
  })
  const port = await listen(app)
  t.teardown(() => app.close())
  const body = Buffer.alloc(300_000, 'a')
  for (const path of ['/data', '/readable']) {
    const send = (digest: string) => rawRequest(port, [`POST ${path} HTTP/1.1`, 'Host: localhost', 'Content-Type: application/x-sniff', `Content-Length: ${body.length}`, `Content-Digest: ${digest}`],
      [body.subarray(0, 100_000), body.subarray(100_000)])
    const right = await send(sha256(body))
    t.equal(right.status, 202, path)
    t.same(JSON.parse(right.body), { magic: 'aaaa' })
    t.equal((await send(sha256('other'))).status, 400, `${path}: the reply became the problem`)
  }
})

t.test('a reply before an unannounced trailer field arrives waits for it and becomes the problem', async (t) => {
  const app = Fastify()
  await app.register(fastifyDigestFields)
  app.addContentTypeParser('application/octet-stream', (_request, _payload, done) => done(null))
  app.post('/', async (_request, reply) => reply.code(201).send({ stored: true }))
  const port = await listen(app)
  t.teardown(() => app.close())
  const content = Buffer.alloc(5000, 'c')
  const response = await rawRequest(port, ['POST / HTTP/1.1', 'Host: localhost', 'Content-Type: application/octet-stream', 'Transfer-Encoding: chunked'],
    [Buffer.concat([Buffer.from(`${content.length.toString(16)}\r\n`), content, Buffer.from('\r\n')]), Buffer.from(`0\r\nContent-Digest: ${sha256('forged')}\r\n\r\n`)])
  t.equal(response.status, 400)
  const honest = await rawRequest(port, ['POST / HTTP/1.1', 'Host: localhost', 'Content-Type: application/octet-stream', 'Transfer-Encoding: chunked'],
    [Buffer.concat([Buffer.from(`${content.length.toString(16)}\r\n`), content, Buffer.from('\r\n')]), Buffer.from('0\r\n\r\n')])
  t.equal(honest.status, 201)
})

t.test('a supplied digest does not describe a representation @fastify/compress coded after the handler', async (t) => {
  const app = Fastify()
  await app.register(fastifyDigestFields)
  await app.register(fastifyCompress, { threshold: 16 })
  const file = Buffer.from('downloadable '.repeat(400))
  app.get('/download', async (_request, reply) => reply.reprDigest({ 'sha-256': createHash('sha256').update(file).digest() }).type('application/octet-stream').send(file))
  const port = await listen(app)
  t.teardown(() => app.close())
  const response = await request(`http://127.0.0.1:${port}/download`, { headers: { 'want-repr-digest': 'sha-256=1', 'accept-encoding': 'gzip' } })
  t.equal(response.headers['content-encoding'], 'gzip')
  t.equal(response.headers['repr-digest'], sha256(Buffer.from(await response.body.arrayBuffer())), 'the gzip representation, hashed')
})

t.test('a preference field of 9,000 keys is judged in one pass', async (t) => {
  const app = Fastify()
  await app.register(fastifyDigestFields)
  app.get('/', async () => 'ok')
  const want = Array.from({ length: 9000 }, (_, i) => `k${i}=${i % 10}`).join(', ') + ', sha-256=1, sha-512=2.0'
  const response = await app.inject({ method: 'GET', url: '/', headers: { 'want-repr-digest': want } })
  t.equal(response.statusCode, 400)
  t.equal(response.json().detail, 'Want-Repr-Digest gives sha-512 a preference that is not an integer from 0 to 10')
})
