import { once } from 'node:events'
import { connect } from 'node:net'
import { pipeline } from 'node:stream/promises'
import { Writable } from 'node:stream'
import t from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import type { IncomingMessage } from 'node:http'
import fastifyDigestFields from '../../lib/index.js'
import { fuzzSeed, h2Request, hello, helloSha256, listen, member, problemTypes, rawRequest, seededRandom, watchProcess, type RawResponse, type Tap } from '../helpers.js'

const events = ['data', 'end', 'error', 'close'] as const

async function uploadApp (): Promise<{ app: FastifyInstance, raws: IncomingMessage[], handled: string[] }> {
  const app = Fastify()
  await app.register(fastifyDigestFields)
  const raws: IncomingMessage[] = []
  const handled: string[] = []
  app.addHook('onRequest', async (request) => { raws.push(request.raw) })
  app.addContentTypeParser('application/octet-stream', { parseAs: 'buffer' }, (_request, body, done) => done(null, body))
  app.addContentTypeParser('application/x-stream', (_request, payload, done) => done(null, payload))
  app.put('/buffered', async (request) => { handled.push('buffered'); return { length: (request.body as Buffer).length } })
  app.put('/streamed', async (request) => {
    await pipeline(request.body as NodeJS.ReadableStream, new Writable({ write (_chunk, _encoding, callback) { callback() } }))
    handled.push('streamed')
    return 'ok'
  })
  return { app, raws, handled }
}

t.test('clients that abort mid-upload at random points leave nothing behind and the server goes on', async (t) => {
  const escaped = watchProcess(t)
  const { app, raws, handled } = await uploadApp()
  const port = await listen(app)
  t.teardown(() => app.close())
  const body = Buffer.alloc(512 * 1024, 7)
  const aborts = 60
  const random = seededRandom()
  t.comment(`seed ${fuzzSeed} (DIGEST_FUZZ_SEED replays it)`)
  for (let i = 0; i < aborts; i++) {
    const route = i % 2 === 0 ? '/buffered' : '/streamed'
    const type = i % 2 === 0 ? 'application/octet-stream' : 'application/x-stream'
    const sent = Math.floor(random() * body.length)
    const socket = connect({ host: '127.0.0.1', port })
    socket.on('error', () => {})
    await once(socket, 'connect')
    socket.write(`PUT ${route} HTTP/1.1\r\nHost: localhost\r\nContent-Type: ${type}\r\nContent-Length: ${body.length}\r\nContent-Digest: ${member('sha-256', body)}\r\n\r\n`)
    socket.end(body.subarray(0, sent))
    // The server sees the request, then its connection closing half-way through the content.
    while (raws.length <= i) await once(app.server, 'request')
    const raw = raws[i] as IncomingMessage
    if (!raw.destroyed) await new Promise((resolve) => raw.once('close', resolve))
  }
  t.equal(raws.length, aborts)
  t.same(raws.filter((raw) => !raw.destroyed).length, 0, 'every aborted request is closed')
  // Fastify's parser removes its listeners; pipeline() leaves its own on a stream it gave up on,
  // with or without the plugin, which adds none.
  t.same(raws.filter((raw, i) => i % 2 === 0 && events.some((event) => raw.listenerCount(event) > 0)).length, 0, 'no listener is left on a request read by Fastify')
  t.same(raws.filter((raw) => raw.listenerCount('data') > 0).length, 0, 'no data listener is left on any request')
  t.same(handled, [], 'no handler completed on a partial upload')
  const after = await rawRequest(port, ['PUT /buffered HTTP/1.1', 'Host: localhost', 'Content-Type: application/octet-stream', `Content-Length: ${body.length}`, `Content-Digest: ${member('sha-256', body)}`], [body])
  t.equal(after.status, 200, 'the server answers the next request')
  t.same(escaped, [], 'no unhandled error')
  t.comment(`aborted uploads: ${aborts}`)
})

t.test('a slow client that trickles its body is verified like any other', async (t) => {
  const { app, handled } = await uploadApp()
  const port = await listen(app)
  t.teardown(() => app.close())
  const body = Buffer.from(hello)
  const trickle = Array.from(body, (byte) => Buffer.from([byte]))
  const head = (digest: string): string[] => ['PUT /streamed HTTP/1.1', 'Host: localhost', 'Content-Type: application/x-stream', `Content-Length: ${body.length}`, `Content-Digest: ${digest}`]
  // One byte every 15 ms.
  const slowly = (digest: string): Promise<RawResponse> => rawRequest(port, head(digest), trickle, 15)
  t.equal((await slowly(helloSha256)).status, 200)
  const wrong = await slowly(member('sha-256', 'x'))
  t.equal(wrong.status, 400)
  t.match(wrong.body, /digest-mismatching-value/)
  t.same(handled, ['streamed'])
})

/** A server with a 1 KiB bodyLimit and Fastify's buffer parser at PUT /. */
async function limited (t: Tap, http2: boolean): Promise<number> {
  const app = Fastify({ http2: http2 as false, bodyLimit: 1024 })
  await app.register(fastifyDigestFields)
  app.addContentTypeParser('application/octet-stream', { parseAs: 'buffer' }, (_request, body, done) => done(null, body))
  app.put('/', async () => 'ok')
  const port = await listen(app)
  t.teardown(() => app.close())
  return port
}

t.test('a body over bodyLimit keeps Fastify\'s 413, not a digest problem', async (t) => {
  const escaped = watchProcess(t)
  const port = await limited(t, false)
  const body = Buffer.alloc(4096, 1)
  const declared = await rawRequest(port, ['PUT / HTTP/1.1', 'Host: localhost', 'Content-Type: application/octet-stream', `Content-Length: ${body.length}`, `Content-Digest: ${member('sha-256', body)}`], [body])
  t.equal(declared.status, 413)
  t.equal(JSON.parse(declared.body).code, 'FST_ERR_CTP_BODY_TOO_LARGE')
  const chunk = (data: Buffer): Buffer => Buffer.concat([Buffer.from(`${data.length.toString(16)}\r\n`), data, Buffer.from('\r\n')])
  const chunked = await rawRequest(port, ['PUT / HTTP/1.1', 'Host: localhost', 'Content-Type: application/octet-stream', 'Transfer-Encoding: chunked', `Content-Digest: ${member('sha-256', body)}`],
    [chunk(body.subarray(0, 2048)), chunk(body.subarray(2048)), Buffer.from('0\r\n\r\n')])
  t.equal(chunked.status, 413)
  t.equal(JSON.parse(chunked.body).code, 'FST_ERR_CTP_BODY_TOO_LARGE')
  // Before, Fastify stopped listening at the limit, the verifier read on, and at the end emitted
  // 'error' with no listener: this one request took the process down.
  const tampered = await rawRequest(port, ['PUT / HTTP/1.1', 'Host: localhost', 'Content-Type: application/octet-stream', 'Transfer-Encoding: chunked', `Content-Digest: ${member('sha-256', 'x')}`],
    [chunk(body.subarray(0, 2048)), chunk(body.subarray(2048)), Buffer.from('0\r\n\r\n')])
  t.equal(tampered.status, 413)
  t.same(escaped, [], 'nothing escaped to the process')
})

t.test('an HTTP/2 body over bodyLimit with a wrong digest gets 413 and the process survives', async (t) => {
  const escaped = watchProcess(t)
  const port = await limited(t, true)
  const body = Buffer.alloc(4096, 1)
  const headers = { ':method': 'PUT', ':path': '/', 'content-type': 'application/octet-stream', 'content-digest': member('sha-256', 'x') }
  const response = await h2Request(port, headers, [body.subarray(0, 2048), body.subarray(2048)])
  t.equal(response.status, 413)
  t.equal((await h2Request(port, { ...headers, 'content-digest': member('sha-256', 'abc') }, [Buffer.from('abc')])).status, 200)
  t.same(escaped, [], 'nothing escaped to the process')
})

t.test('a Content-Length that disagrees with the body keeps Fastify\'s own 400', async (t) => {
  const app = Fastify()
  await app.register(fastifyDigestFields)
  let handled = 0
  app.post('/', async () => { handled++; return 'ok' })
  const response = await app.inject({
    method: 'POST', url: '/', payload: hello, headers: { 'content-type': 'application/json', 'content-length': '10', 'content-digest': helloSha256 }
  })
  t.equal(response.statusCode, 400)
  t.equal(response.json().code, 'FST_ERR_CTP_INVALID_CONTENT_LENGTH')
  t.equal(handled, 0)
})

t.test('a body parser that fails after a successful digest check keeps its own error', async (t) => {
  const app = Fastify()
  await app.register(fastifyDigestFields)
  app.addContentTypeParser('text/csv', { parseAs: 'string' }, (_request, body, done) => {
    done(Object.assign(new Error(`cannot parse ${String(body).length} bytes of CSV`), { statusCode: 422 }))
  })
  let handled = 0
  app.post('/', async () => { handled++; return 'ok' })
  const port = await listen(app)
  t.teardown(() => app.close())
  const csv = 'a,b\n1,"2'
  const response = await rawRequest(port, ['POST / HTTP/1.1', 'Host: localhost', 'Content-Type: text/csv', `Content-Length: ${csv.length}`, `Content-Digest: ${member('sha-512', csv)}`], [Buffer.from(csv)])
  t.equal(response.status, 422)
  t.equal(JSON.parse(response.body).message, `cannot parse ${csv.length} bytes of CSV`)
  const mismatch = await rawRequest(port, ['POST / HTTP/1.1', 'Host: localhost', 'Content-Type: text/csv', `Content-Length: ${csv.length}`, `Content-Digest: ${member('sha-512', 'x')}`], [Buffer.from(csv)])
  t.equal(JSON.parse(mismatch.body).type, problemTypes + 'digest-mismatching-value', 'the digest is checked before the parser sees the body')
  t.equal(handled, 0)
})

t.test('a request the server destroys mid-body errors the handed stream instead of leaving it hanging', async (t) => {
  const escaped = watchProcess(t)
  const app = Fastify()
  await app.register(fastifyDigestFields)
  app.addContentTypeParser('application/x-stream', (_request, payload, done) => done(null, payload))
  let settle: (outcome: string) => void = () => {}
  const outcome = new Promise<string>((resolve) => { settle = resolve })
  app.put('/', async (request) => {
    const stream = request.body as NodeJS.ReadableStream
    // The server gives up on the request after its first chunk, as a timeout would.
    stream.once('data', () => request.raw.destroy())
    await pipeline(stream, new Writable({ write (_chunk, _encoding, callback) { callback() } }))
      .then(() => settle('ended'), (error: Error) => settle(`error: ${error.message}`))
    return 'ok'
  })
  const port = await listen(app)
  t.teardown(() => app.close())
  const socket = connect({ host: '127.0.0.1', port })
  socket.on('error', () => {})
  await once(socket, 'connect')
  socket.write(`PUT / HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/x-stream\r\nContent-Length: 100000\r\nContent-Digest: ${helloSha256}\r\n\r\n`)
  // The content is handed on as more of it arrives, so keep sending until the server gives up.
  for (let i = 0; i < 90 && !socket.destroyed; i++) {
    socket.write(Buffer.alloc(1000))
    await new Promise((resolve) => setImmediate(resolve))
  }
  t.match(await outcome, /^error: /, 'the reader saw an error, not an end')
  t.same(escaped, [])
})
