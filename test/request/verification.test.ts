import { pipeline } from 'node:stream/promises'
import { Writable } from 'node:stream'
import t from 'tap'
import Fastify from 'fastify'
import { request } from 'undici'
import fastifyDigestFields from '../../lib/index.js'
import {
  base64Digest,
  buildApp,
  describeDigest,
  hello,
  helloSha256,
  helloSha512,
  json,
  listen,
  member,
  problemTypes,
  fuzzSeed,
  randomChunks,
  rawRequest,
  seededRandom
} from '../helpers.js'

t.test('accepts the RFC 9530 sha-256 example and exposes it on request.digest', async (t) => {
  const { app, calls } = await buildApp()
  const response = await app.inject({ method: 'POST', url: '/', payload: hello, headers: { ...json, 'content-digest': helloSha256 } })
  t.equal(response.statusCode, 200)
  t.same(response.json(), {
    body: { hello: 'world' },
    digest: { fields: ['content-digest'], values: { 'sha-256': 'X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=' } }
  })
  t.equal(calls.handler, 1)
})

t.test('accepts the RFC 9530 sha-512 example in Repr-Digest', async (t) => {
  const { app } = await buildApp()
  const response = await app.inject({ method: 'POST', url: '/', payload: hello, headers: { ...json, 'repr-digest': helloSha512 } })
  t.equal(response.statusCode, 200)
  t.same(response.json().digest.fields, ['repr-digest'])
  t.same(Object.keys(response.json().digest.values), ['sha-512'])
})

t.test('rejects a sha-256 digest of other content with the mismatching-value problem', async (t) => {
  const { app, calls } = await buildApp()
  const provided = base64Digest('sha-256', '{"hello": "World"}')
  const response = await app.inject({
    method: 'POST', url: '/', payload: hello, headers: { ...json, 'content-digest': `sha-256=:${provided}:` }
  })
  t.equal(response.statusCode, 400)
  t.equal(response.headers['content-type'], 'application/problem+json')
  t.same(response.json(), {
    type: problemTypes + 'digest-mismatching-value',
    title: 'Mismatching Digest Value',
    algorithm: 'sha-256',
    'provided-digest': `:${provided}:`,
    'calculated-digest': ':X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:'
  })
  t.equal(calls.handler, 0)
})

t.test('checks both fields together, and every algorithm of a field', async (t) => {
  const { app, calls } = await buildApp()
  const both = `${helloSha256}, ${helloSha512}`
  const ok = await app.inject({ method: 'POST', url: '/', payload: hello, headers: { ...json, 'content-digest': both, 'repr-digest': both } })
  t.equal(ok.statusCode, 200)
  t.same(ok.json().digest.fields, ['content-digest', 'repr-digest'])
  t.same(Object.keys(ok.json().digest.values).sort(), ['sha-256', 'sha-512'])

  const wrong512 = `sha-512=:${base64Digest('sha-512', 'other')}:`
  const bad = await app.inject({
    method: 'POST', url: '/', payload: hello, headers: { ...json, 'content-digest': helloSha256, 'repr-digest': `${helloSha256}, ${wrong512}` }
  })
  t.equal(bad.statusCode, 400)
  t.equal(bad.json().type, problemTypes + 'digest-mismatching-value')
  t.equal(bad.json().algorithm, 'sha-512')
  t.equal(calls.handler, 1)
})

t.test('rejects a Repr-Digest that differs from a matching Content-Digest', async (t) => {
  const { app, calls } = await buildApp()
  const response = await app.inject({
    method: 'POST', url: '/', payload: hello, headers: { ...json, 'content-digest': helloSha256, 'repr-digest': member('sha-256', 'x') }
  })
  t.equal(response.statusCode, 400)
  t.equal(response.json()['provided-digest'], `:${base64Digest('sha-256', 'x')}:`)
  t.equal(calls.handler, 0)
})

t.test('accepts unpadded base64 and reports the provided digest padded', async (t) => {
  const { app } = await buildApp()
  const ok = await app.inject({
    method: 'POST', url: '/', payload: hello, headers: { ...json, 'content-digest': 'sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE:' }
  })
  t.equal(ok.statusCode, 200)
  const bad = await app.inject({
    method: 'POST', url: '/', payload: 'other', headers: { ...json, 'content-digest': 'sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE:' }
  })
  t.equal(bad.json()['provided-digest'], ':X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:')
})

t.test('checks an empty body against the digest of empty content', async (t) => {
  const { app, calls } = await buildApp()
  app.get('/read', async (request) => ({ digest: describeDigest(request.digest) }))
  const empty = member('sha-256', '')

  const post = await app.inject({ method: 'POST', url: '/', headers: { 'content-digest': empty } })
  t.equal(post.statusCode, 200)
  t.same(post.json().digest.fields, ['content-digest'])

  const get = await app.inject({ method: 'GET', url: '/read', headers: { 'repr-digest': empty } })
  t.equal(get.statusCode, 200)
  t.same(get.json().digest.values, { 'sha-256': base64Digest('sha-256', '') })

  // Fastify never reads an empty body, so this is where failing open would happen.
  const wrong = await app.inject({ method: 'POST', url: '/', headers: { 'content-digest': helloSha256, 'content-length': '0' } })
  t.equal(wrong.statusCode, 400)
  t.equal(wrong.json().type, problemTypes + 'digest-mismatching-value')
  t.equal(wrong.json()['calculated-digest'], `:${base64Digest('sha-256', '')}:`)

  const wrongGet = await app.inject({ method: 'GET', url: '/read', headers: { 'content-digest': helloSha256 } })
  t.equal(wrongGet.statusCode, 400)
  t.equal(calls.handler, 1)
})

t.test('does nothing to a request without digest fields', async (t) => {
  const { app } = await buildApp()
  const response = await app.inject({ method: 'POST', url: '/', payload: hello, headers: json })
  t.equal(response.statusCode, 200)
  t.same(response.json(), { body: { hello: 'world' }, digest: null })
})

t.test('verifies a body written over a real socket in random chunk sizes', async (t) => {
  const { app, calls } = await buildApp()
  app.addContentTypeParser('application/octet-stream', { parseAs: 'buffer' }, (_request, body, done) => done(null, body))
  // Counted like the app's own route, so that the handler assertion below can fail.
  app.post('/bytes', async (request) => {
    calls.handler++
    return { length: (request.body as Buffer).length, digest: describeDigest(request.digest) }
  })
  const port = await listen(app)
  t.teardown(() => app.close())

  const random = seededRandom()
  t.comment(`seed ${fuzzSeed} (DIGEST_FUZZ_SEED replays it)`)
  for (let round = 0; round < 20; round++) {
    const body = Buffer.from(Array.from({ length: Math.floor(random() * 200_000) }, () => Math.floor(random() * 256)))
    const chunks = randomChunks(body, 1 + Math.floor(random() * 20_000), random)
    const corrupt = round % 2 === 1
    const digested = corrupt ? Buffer.concat([body, Buffer.from('x')]) : body
    const head = [
      'POST /bytes HTTP/1.1', 'Host: localhost', 'Content-Type: application/octet-stream',
      `Content-Length: ${body.length}`, `Content-Digest: ${member('sha-512', digested)}`
    ]
    const response = await rawRequest(port, head, chunks)
    if (corrupt) {
      t.equal(response.status, 400, `round ${round}: corrupted digest of ${body.length} bytes in ${chunks.length} chunks`)
      t.equal(JSON.parse(response.body).type, problemTypes + 'digest-mismatching-value')
    } else {
      t.equal(response.status, 200, `round ${round}: ${body.length} bytes in ${chunks.length} chunks`)
      t.equal(JSON.parse(response.body).length, body.length)
    }
  }
  t.equal(calls.handler, 10, 'the handler ran for the 10 intact bodies only')
})

t.test('verifies a chunked transfer-coded body over a real socket', async (t) => {
  const { app } = await buildApp()
  const port = await listen(app)
  t.teardown(() => app.close())
  const chunked = (body: string): Buffer[] => [
    Buffer.from(`${Buffer.byteLength(body.slice(0, 5)).toString(16)}\r\n${body.slice(0, 5)}\r\n`),
    Buffer.from(`${Buffer.byteLength(body.slice(5)).toString(16)}\r\n${body.slice(5)}\r\n`),
    Buffer.from('0\r\n\r\n')
  ]
  const head = (digest: string): string[] => [
    'POST / HTTP/1.1', 'Host: localhost', 'Content-Type: application/json', 'Transfer-Encoding: chunked', `Content-Digest: ${digest}`
  ]
  // The digest covers the content after the transfer coding is removed (RFC 9530 section 2).
  const ok = await rawRequest(port, head(helloSha256), chunked(hello))
  t.equal(ok.status, 200)
  const bad = await rawRequest(port, head(helloSha256), chunked('{"hello": "World"}'))
  t.equal(bad.status, 400)
  t.equal(JSON.parse(bad.body).type, problemTypes + 'digest-mismatching-value')
})

t.test('reads fields split over several header lines as one field', async (t) => {
  const { app } = await buildApp()
  const port = await listen(app)
  t.teardown(() => app.close())
  const head = (lines: string[]): string[] => [
    'POST / HTTP/1.1', 'Host: localhost', 'Content-Type: application/json', `Content-Length: ${hello.length}`, ...lines
  ]
  const ok = await rawRequest(port, head([`Content-Digest: ${helloSha256}`, `Content-Digest: ${helloSha512}`]), [Buffer.from(hello)])
  t.equal(ok.status, 200)
  t.same(Object.keys(JSON.parse(ok.body).digest.values).sort(), ['sha-256', 'sha-512'])

  const bad = await rawRequest(port, head([`Content-Digest: ${helloSha256}`, `Content-Digest: ${member('sha-512', 'x')}`]), [Buffer.from(hello)])
  t.equal(bad.status, 400)
  t.equal(JSON.parse(bad.body).algorithm, 'sha-512')
})

t.test('with Content-Range, checks Content-Digest but not the Repr-Digest of the whole representation', async (t) => {
  const { app, calls } = await buildApp()
  app.patch('/upload', async (request) => {
    calls.handler++
    return { digest: describeDigest(request.digest) }
  })
  const part = 'world'
  const headers = {
    'content-type': 'text/plain',
    'content-range': 'bytes 10-14/18',
    'repr-digest': helloSha256
  }
  const partial = await app.inject({ method: 'PATCH', url: '/upload', payload: part, headers: { ...headers, 'content-digest': member('sha-256', part) } })
  t.equal(partial.statusCode, 200)
  t.same(partial.json().digest.fields, ['content-digest'])

  const wrongPart = await app.inject({ method: 'PATCH', url: '/upload', payload: part, headers: { ...headers, 'content-digest': helloSha256 } })
  t.equal(wrongPart.statusCode, 400)
  t.equal(wrongPart.json().type, problemTypes + 'digest-mismatching-value')

  // The whole representation's digest is still judged for its form.
  const invalid = await app.inject({ method: 'PATCH', url: '/upload', payload: part, headers: { ...headers, 'repr-digest': 'sha-256=:AAAA:' } })
  t.equal(invalid.json().type, problemTypes + 'digest-invalid-value')
  t.equal(calls.handler, 1)
})

t.test('a stream handed to the handler errors instead of ending when the digest differs', async (t) => {
  const app = Fastify()
  await app.register(fastifyDigestFields)
  app.addContentTypeParser('application/octet-stream', (_request, payload, done) => done(null, payload))
  const outcomes: string[] = []
  app.put('/stream', async (request) => {
    let received = 0
    await pipeline(request.body as NodeJS.ReadableStream, new Writable({
      write (chunk, _encoding, callback) { received += chunk.length; callback() }
    })).then(() => outcomes.push(`kept ${received}`), (error) => {
      outcomes.push('discarded')
      throw error
    })
    return { received, digest: describeDigest(request.digest) }
  })
  const port = await listen(app)
  t.teardown(() => app.close())
  const body = Buffer.alloc(300_000, 'digest')
  const url = `http://127.0.0.1:${port}/stream`
  const headers = { 'content-type': 'application/octet-stream' }

  const ok = await request(url, { method: 'PUT', body, headers: { ...headers, 'content-digest': member('sha-256', body) } })
  t.equal(ok.statusCode, 200)
  t.same((await ok.body.json() as { digest: unknown }).digest, { fields: ['content-digest'], values: { 'sha-256': base64Digest('sha-256', body) } })

  const bad = await request(url, { method: 'PUT', body, headers: { ...headers, 'content-digest': member('sha-256', 'x') } })
  t.equal(bad.statusCode, 400)
  t.equal(bad.headers['content-type'], 'application/problem+json')
  t.equal((await bad.body.json() as { type: string }).type, problemTypes + 'digest-mismatching-value')
  t.same(outcomes, [`kept ${body.length}`, 'discarded'])
})

t.test('the handler does not run on any failure', async (t) => {
  const { app, calls } = await buildApp()
  const failures: Record<string, string>[] = [
    { 'content-digest': 'sha-256=:not base64!:' },
    { 'content-digest': 'md5=:AAAA:' },
    { 'want-content-digest': 'crc32c=3' },
    { 'repr-digest': 'sha-512=:AAAA:' },
    { 'content-digest': member('sha-256', 'x') },
    { 'repr-digest': member('sha-512', 'x') },
    { 'want-repr-digest': 'sha-256=11' }
  ]
  for (const headers of failures) {
    const response = await app.inject({ method: 'POST', url: '/', payload: hello, headers: { ...json, ...headers } })
    t.equal(response.statusCode, 400, JSON.stringify(headers))
    t.match(response.headers['content-type'], /^application\/problem\+json$/)
  }
  t.equal(calls.handler, 0)
})
