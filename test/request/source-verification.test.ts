import { connect } from 'node:net'
import { once } from 'node:events'
import t from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import fastifyDigestFields from '../../lib/index.js'
import { h2Request, hello, helloSha256, listen, member, problemTypes, rawRequest, type RawResponse } from '../helpers.js'

// What is verified is what was received, byte for byte: whatever readers do to the chunks, and
// whenever the plugin's hook runs relative to the connection delivering them.

/** An app echoing text bodies; `before` runs before the plugin is registered, `after` after it. */
type Setup = (app: FastifyInstance) => void

async function textApp ({ before = () => {}, after = () => {} }: { before?: Setup, after?: Setup } = {}): Promise<{ app: FastifyInstance, port: number }> {
  const app = Fastify()
  before(app)
  await app.register(fastifyDigestFields)
  after(app)
  app.post('/', async (request) => ({ body: request.body, digest: request.digest?.fields ?? null }))
  const port = await listen(app)
  t.teardown(() => app.close())
  return { app, port }
}

/** Writes the head and content in one write, so that the server's parser gets both in one read. */
async function inOneWrite (port: number, head: string[], content: string): Promise<RawResponse> {
  const socket = connect({ host: '127.0.0.1', port })
  await once(socket, 'connect')
  socket.end([...head, 'Connection: close', '', content].join('\r\n'))
  const received: Buffer[] = []
  socket.on('data', (data: Buffer) => received.push(data))
  await once(socket, 'close')
  const text = Buffer.concat(received).toString()
  return { status: Number(text.split(' ')[1]), headers: {}, body: text.slice(text.indexOf('\r\n\r\n') + 4) }
}

const post = (type: string, length: number, digest: string): string[] =>
  ['POST / HTTP/1.1', 'Host: localhost', `Content-Type: ${type}`, `Content-Length: ${length}`, `Content-Digest: ${digest}`]

t.test('a reader that changes chunks in place changes nothing that is verified', async (t) => {
  // Before, the first chunk was hashed after it was handed on, so `hello` sent with the digest of
  // `HELLO` was accepted once a reader had upper-cased it.
  const { port } = await textApp({
    after: (app) => {
      app.addHook('preParsing', async (_request, _reply, payload) => {
        payload.on('data', (chunk: Buffer) => { chunk.set(Buffer.from(chunk.toString('latin1').toUpperCase(), 'latin1')) })
        return payload
      })
      // Read as bytes: Fastify 6's text parser decodes the stream, so that its readers get strings.
      app.addContentTypeParser('text/plain', { parseAs: 'buffer' }, (_request, body, done) => { done(null, body.toString('latin1')) })
    }
  })
  for (const chunks of [[Buffer.from('hello')], [Buffer.from('he'), Buffer.from('llo')]]) {
    const forged = await rawRequest(port, post('text/plain', 5, member('sha-256', 'HELLO')), chunks)
    t.equal(forged.status, 400, `in ${chunks.length} chunks`)
    t.equal(JSON.parse(forged.body).type, problemTypes + 'digest-mismatching-value')
    const honest = await rawRequest(port, post('text/plain', 5, member('sha-256', 'hello')), chunks)
    t.equal(honest.status, 200)
    t.same(JSON.parse(honest.body), { body: 'HELLO', digest: ['content-digest'] }, 'the reader still gets its changes')
  }
})

t.test('content that arrived before the plugin\'s hook ran (an asynchronous onRequest hook) is verified', async (t) => {
  const { port } = await textApp({
    // Registered before the plugin, so it runs first: by the time it resolves, the parser has pushed
    // what the first read held into request.raw.
    before: (app) => app.addHook('onRequest', async () => { await new Promise((resolve) => setImmediate(resolve)) })
  })
  // Complete before the hook: judged at once.
  t.equal((await inOneWrite(port, post('text/plain', 5, member('sha-256', 'hello')), 'hello')).status, 200)
  const wrong = await inOneWrite(port, post('text/plain', 5, member('sha-256', 'jello')), 'hello')
  t.equal(wrong.status, 400)
  t.equal(JSON.parse(wrong.body).type, problemTypes + 'digest-mismatching-value')
  // Partly there before the hook, the rest after.
  const content = 'x'.repeat(50_000)
  const head = post('text/plain', content.length, member('sha-512', content))
  const [first, rest] = [Buffer.from([...head, '', content.slice(0, 1000)].join('\r\n')), Buffer.from(content.slice(1000))]
  const socket = connect({ host: '127.0.0.1', port })
  await once(socket, 'connect')
  const received: Buffer[] = []
  socket.on('data', (data: Buffer) => received.push(data))
  socket.write(first)
  await new Promise((resolve) => setImmediate(resolve))
  socket.end(rest)
  await once(socket, 'close')
  t.match(Buffer.concat(received).toString(), /^HTTP\/1.1 200/)
})

t.test('content a reader took before the plugin\'s hook ran is refused, never passed', async (t) => {
  const { port } = await textApp({
    before: (app) => app.addHook('onRequest', async (request) => {
      await once(request.raw, 'readable')
      request.raw.read()
    })
  })
  const response = await inOneWrite(port, post('text/plain', 5, member('sha-256', 'hello')), 'hello')
  t.equal(response.status, 400)
  t.same(JSON.parse(response.body), {
    type: 'about:blank',
    title: 'Bad Request',
    detail: 'the integrity fields of this request cannot be verified: its content was read before the plugin could hash it'
  })
})

t.test('only a valid Content-Range makes a request partial', async (t) => {
  // Before, any Content-Range value, even "lol", switched the Repr-Digest comparison off.
  const { port } = await textApp()
  const send = (range: string): Promise<RawResponse> => rawRequest(port, [
    'POST / HTTP/1.1', 'Host: localhost', 'Content-Type: text/plain', 'Content-Length: 5', `Content-Range: ${range}`,
    `Repr-Digest: ${member('sha-256', 'the whole representation')}`
  ], [Buffer.from('hello')])
  for (const range of ['bytes 0-4/24', 'bytes 0-4/*', 'bytes 10-14/15', 'pages 0-4/24']) {
    t.equal((await send(range)).status, 200, `${range}: partial, Repr-Digest not compared`)
  }
  for (const range of ['lol', 'bytes 5-2/10', 'bytes 0-4/4', 'bytes 0-4/3', 'bytes */24', 'bytes 0-4', 'bytes=0-4/24', '']) {
    const response = await send(range)
    t.equal(response.status, 400, `${JSON.stringify(range)}: not a valid range, Repr-Digest compared`)
    t.equal(JSON.parse(response.body).type, problemTypes + 'digest-mismatching-value')
  }
})

t.test('Content-Length is read as the number it is', async (t) => {
  // Before, "00" was taken for content, and an empty body with the digest of empty content was
  // refused.
  const { port } = await textApp()
  const empty = member('sha-256', '')
  const response = await rawRequest(port, post('text/plain', 0, empty).map((line) => line.replace('Content-Length: 0', 'Content-Length: 00')))
  t.equal(response.status, 200)
  t.same(JSON.parse(response.body), { body: '', digest: ['content-digest'] })
  const wrong = await rawRequest(port, post('text/plain', 0, helloSha256).map((line) => line.replace('Content-Length: 0', 'Content-Length: 00')))
  t.equal(wrong.status, 400)
})

t.test('an HTTP/2 request whose content is one empty DATA frame has the digest of empty content', async (t) => {
  const app = Fastify({ http2: true })
  await app.register(fastifyDigestFields)
  app.post('/', async (request) => ({ body: request.body, digest: request.digest?.fields ?? null }))
  const port = await listen(app)
  t.teardown(() => app.close())
  const headers = { ':method': 'POST', ':path': '/', 'content-type': 'text/plain' }
  const empty = await h2Request(port, { ...headers, 'content-digest': member('sha-256', '') }, [Buffer.alloc(0)])
  t.equal(empty.status, 200)
  t.same(JSON.parse(empty.body), { body: '', digest: ['content-digest'] })
  const wrong = await h2Request(port, { ...headers, 'content-digest': helloSha256 }, [Buffer.alloc(0)])
  t.equal(wrong.status, 400)
  const whole = await h2Request(port, { ...headers, 'content-digest': helloSha256 }, [Buffer.from(hello)])
  t.equal(whole.status, 200)
})

t.test('a Content-Length that is not a number leaves the length unknown, and the content is still verified', async (t) => {
  // Node refuses such a request on a connection; inject() passes it on as given.
  const { app } = await textApp()
  const send = (digest: string) => app.inject({ method: 'POST', url: '/', payload: 'hello', headers: { 'content-type': 'text/plain', 'content-length': '5 ', 'content-digest': digest } })
  t.equal((await send(member('sha-256', 'hello'))).statusCode, 200)
  const wrong = await send(member('sha-256', 'jello'))
  t.equal(wrong.statusCode, 400)
  t.equal(wrong.json().type, problemTypes + 'digest-mismatching-value')
})

t.test('field lines given as an array are one field, joined as RFC 9110 section 5.3 says', async (t) => {
  const { app } = await textApp()
  const send = (lines: string[]) => app.inject({ method: 'POST', url: '/', payload: 'hello', headers: { 'content-type': 'text/plain', 'content-digest': lines } })
  t.equal((await send([member('sha-256', 'hello'), member('sha-512', 'hello')])).statusCode, 200)
  t.equal((await send([member('sha-256', 'hello'), member('sha-512', 'jello')])).json().algorithm, 'sha-512')
})
