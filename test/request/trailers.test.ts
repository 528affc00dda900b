import { connect } from 'node:http2'
import t from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import fastifyDigestFields, { type FastifyDigestFieldsOptions } from '../../lib/index.js'
import { hello, helloSha256, helloSha512, listen, member, problemTypes, rawRequest, type RawResponse } from '../helpers.js'

// Integrity fields in the trailer section (RFC 9530 sections 2 and 3, RFC 9110 section 6.5), over
// HTTP/1.1 chunked requests on a raw socket and HTTP/2 with node:http2: verified against the
// content before it ends for any reader, judged with the same problem types as header fields,
// and never passed silently.

interface Served { port: number, handled: string[] }

async function serve (http2: boolean, options: FastifyDigestFieldsOptions = {}): Promise<Served> {
  const app: FastifyInstance = Fastify({ http2: http2 as false })
  await app.register(fastifyDigestFields, options)
  const handled: string[] = []
  app.post('/', async (request) => {
    handled.push(JSON.stringify(request.body))
    return { fields: request.digest?.fields ?? null }
  })
  const port = await listen(app)
  t.teardown(() => app.close())
  return { port, handled }
}

/** POSTs {"hello": "world"} in two pieces, with `headers` and then `trailers`. */
async function post (http2: boolean, port: number, headers: Record<string, string>, trailers: Record<string, string>): Promise<RawResponse> {
  const pieces = [hello.slice(0, 5), hello.slice(5)]
  if (!http2) {
    const chunk = (text: string): Buffer => Buffer.from(`${Buffer.byteLength(text).toString(16)}\r\n${text}\r\n`)
    const end = Buffer.from(['0', ...Object.entries(trailers).map(([name, value]) => `${name}: ${value}`), '', ''].join('\r\n'))
    return await rawRequest(port, [
      'POST / HTTP/1.1', 'Host: localhost', 'Content-Type: application/json', 'Transfer-Encoding: chunked',
      ...Object.entries(headers).map(([name, value]) => `${name}: ${value}`)
    ], [...pieces.map(chunk), end])
  }
  const session = connect(`http://127.0.0.1:${port}`)
  try {
    const stream = session.request({ ':method': 'POST', ':path': '/', 'content-type': 'application/json', ...headers }, { waitForTrailers: true })
    stream.on('wantTrailers', () => stream.sendTrailers(trailers))
    const received: Buffer[] = []
    stream.on('data', (data: Buffer) => received.push(data))
    const response = new Promise<Record<string, string>>((resolve) => stream.once('response', (h) => resolve(h as Record<string, string>)))
    stream.write(pieces[0])
    await new Promise((resolve) => setImmediate(resolve))
    stream.end(pieces[1])
    await new Promise((resolve) => stream.once('close', resolve))
    const responseHeaders = await response
    return { status: Number(responseHeaders[':status']), headers: responseHeaders, body: Buffer.concat(received).toString() }
  } finally {
    session.close()
  }
}

for (const http2 of [false, true]) {
  const over = http2 ? 'HTTP/2' : 'HTTP/1.1'

  t.test(`an announced trailer field is verified like a header field (${over})`, async (t) => {
    const { port, handled } = await serve(http2, { problemTypes: 'registered' })
    const announce = { trailer: 'Content-Digest' }
    const right = await post(http2, port, announce, { 'content-digest': helloSha512 })
    t.equal(right.status, 200, right.body)
    t.same(JSON.parse(right.body), { fields: ['content-digest'] })

    const sent = member('sha-256', 'tampered')
    const wrong = await post(http2, port, announce, { 'content-digest': sent })
    t.equal(wrong.status, 400)
    t.same(JSON.parse(wrong.body), {
      type: problemTypes + 'digest-mismatched-values',
      title: 'Mismatched Digest Values',
      mismatched_digests: [{ algorithm: 'sha-256', provided_digest: sent.slice(8), header: 'Content-Digest' }]
    })
    const unsupported = await post(http2, port, announce, { 'content-digest': 'md5=:AAAA:' })
    t.equal(JSON.parse(unsupported.body).type, problemTypes + 'digest-unsupported-algorithms')
    t.equal(unsupported.headers['want-content-digest'], 'sha-256=10, sha-512=9, md5=0')
    const invalid = await post(http2, port, announce, { 'content-digest': 'sha-256=:AAAA:' })
    t.equal(JSON.parse(invalid.body).type, problemTypes + 'digest-invalid-values')
    t.same(handled, ['{"hello":"world"}'], 'the handler ran for the verified request only')
  })

  t.test(`header and trailer fields are both checked (${over})`, async (t) => {
    const { port, handled } = await serve(http2)
    const headers = { 'repr-digest': helloSha256, trailer: 'Content-Digest' }
    const both = await post(http2, port, headers, { 'content-digest': helloSha512 })
    t.same(JSON.parse(both.body), { fields: ['repr-digest', 'content-digest'] })
    const wrongTrailer = await post(http2, port, headers, { 'content-digest': member('sha-512', 'x') })
    t.equal(JSON.parse(wrongTrailer.body).type, problemTypes + 'digest-mismatching-value')
    t.equal(handled.length, 1)
  })

  t.test(`a trailer field nothing announced is refused, never passed (${over})`, async (t) => {
    // The content was not hashed for it, so it cannot be checked: passing it would be silent.
    const { port, handled } = await serve(http2)
    const unannounced = await post(http2, port, {}, { 'content-digest': helloSha256 })
    t.equal(unannounced.status, 400)
    t.match(JSON.parse(unannounced.body), { type: 'about:blank', detail: /trailer section .* announce them in a Trailer field/ })
    // Hashed anyway for the header field: the same algorithm in the trailer section is compared.
    const hashed = await post(http2, port, { 'repr-digest': helloSha256 }, { 'content-digest': helloSha256 })
    t.same(JSON.parse(hashed.body), { fields: ['repr-digest', 'content-digest'] })
    const notHashed = await post(http2, port, { 'repr-digest': helloSha256 }, { 'content-digest': helloSha512 })
    t.match(JSON.parse(notHashed.body), { type: 'about:blank', detail: /names sha-512, which the content was not hashed with/ })
    t.equal(handled.length, 1)
  })

  t.test(`an announced trailer field counts for required, and must then arrive (${over})`, async (t) => {
    const { port } = await serve(http2, { required: true })
    t.equal((await post(http2, port, { trailer: 'Repr-Digest' }, { 'repr-digest': helloSha256 })).status, 200)
    const missing = await post(http2, port, { trailer: 'Repr-Digest' }, {})
    t.equal(missing.status, 400)
    t.match(JSON.parse(missing.body).detail, /requires a Content-Digest, Repr-Digest or Unencoded-Digest/)
    t.equal((await post(http2, port, {}, {})).status, 400, 'nothing announced, nothing sent')
  })
}

t.test('a route with config.digest false ignores trailer fields', async (t) => {
  const app = Fastify()
  await app.register(fastifyDigestFields)
  app.post('/', { config: { digest: false } }, async (request) => request.body)
  const port = await listen(app)
  t.teardown(() => app.close())
  const response = await post(false, port, {}, { 'content-digest': member('sha-256', 'x') })
  t.equal(response.status, 200)
})

t.test('a chunked request with no digest field anywhere passes untouched', async (t) => {
  const { port, handled } = await serve(false)
  const response = await post(false, port, {}, {})
  t.equal(response.status, 200)
  t.same(JSON.parse(response.body), { fields: null })
  t.equal(handled.length, 1)
})

t.test('an unannounced trailer field is answered by the plugin when no reader listens for errors', async (t) => {
  const app = Fastify()
  await app.register(fastifyDigestFields)
  app.addContentTypeParser('application/json', (_request, _payload, done) => done(null))
  const seen: string[] = []
  app.post('/', (request, reply) => {
    request.raw.on('data', () => {})
    request.raw.on('end', () => { seen.push('end'); reply.send('ok') })
  })
  const port = await listen(app)
  t.teardown(() => app.close())
  const response = await post(false, port, {}, { 'content-digest': helloSha256 })
  t.equal(response.status, 400)
  t.equal(JSON.parse(response.body).type, 'about:blank')
  t.same(seen, [], 'the reader never saw the end')
})
