// Issue 18: fastify-digest-fields/client, the undici interceptor, over real sockets: against the
// plugin, against plain node:http servers that send digests by hand (in the header and the trailer
// section), and through proxies that change bytes on the way. Oracles: Node's createHash over what
// was sent, and the servers' own view of what they received.
import { createHash } from 'node:crypto'
import { createServer, request as httpRequest, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import { Readable, Writable } from 'node:stream'
import { pipeline as streamPipeline } from 'node:stream/promises'
import { gzipSync } from 'node:zlib'
import t from 'tap'
import Fastify from 'fastify'
import { Agent, fetch, request, stream, type Dispatcher } from 'undici'
import fastifyDigestFields from '../../lib/index.js'
import {
  digestInterceptor,
  DigestMismatchError,
  DigestProblemError,
  DigestUnverifiableError,
  type DigestInterceptorOptions,
  type DigestRetry
} from '../../lib/client.js'
import { problemTypes, serving, type Tap } from '../helpers.js'

const sha = (name: 'sha256' | 'sha512', data: string | Buffer): string => createHash(name).update(data).digest('base64')
const field = (key: 'sha-256' | 'sha-512', data: string | Buffer): string => `${key}=:${sha(key === 'sha-256' ? 'sha256' : 'sha512', data)}:`

function client (t: Tap, options: DigestInterceptorOptions = {}): { dispatcher: Dispatcher, retries: DigestRetry[] } {
  const retries: DigestRetry[] = []
  const agent = new Agent()
  t.teardown(() => agent.close())
  return { dispatcher: agent.compose(digestInterceptor({ onRetry: (retry) => { retries.push(retry) }, ...options })), retries }
}

async function listening (t: Tap, server: Server): Promise<string> {
  t.teardown(() => { server.closeAllConnections() })
  return await serving(t, server)
}

async function pluginServer (t: Tap, options: Parameters<typeof fastifyDigestFields>[1] = {}): Promise<{ origin: string, seen: unknown[] }> {
  const app = Fastify()
  await app.register(fastifyDigestFields, { required: true, ...options })
  const seen: unknown[] = []
  app.post('/echo', async (request) => {
    seen.push(request.digest?.fields)
    return { received: request.body }
  })
  app.get('/stream', { config: { digest: { required: false } } }, async (_request, reply) =>
    reply.send(Readable.from([Buffer.from('hello '), Buffer.from('world')])))
  const origin = await app.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => app.close())
  return { origin, seen }
}

// A proxy that changes one byte of the request bodies whose attempt number `corrupt` names (from 1),
// and of the response bodies when `response` says where.
async function corruptingProxy (t: Tap, upstream: string, corrupt: (attempt: number) => boolean, response?: number): Promise<string> {
  let attempt = 0
  const server = createServer((incoming, outgoing) => {
    const flip = corrupt(++attempt)
    const chunks: Buffer[] = []
    incoming.on('data', (chunk: Buffer) => chunks.push(chunk))
    incoming.on('end', () => {
      const body = Buffer.concat(chunks)
      if (flip && body.length > 0) body[body.length >> 1] = (body[body.length >> 1] as number) ^ 1
      const forward = httpRequest(upstream + incoming.url, { method: incoming.method, headers: incoming.headers }, (answer) => {
        const { 'content-length': length, ...headers } = answer.headers
        outgoing.writeHead(answer.statusCode as number, answer.headers.trailer === undefined ? { ...headers, 'content-length': length } : headers)
        let offset = 0
        answer.on('data', (chunk: Buffer) => {
          if (response !== undefined && response >= offset && response < offset + chunk.length) {
            chunk = Buffer.from(chunk)
            chunk[response - offset] = (chunk[response - offset] as number) ^ 1
          }
          offset += chunk.length
          outgoing.write(chunk)
        })
        answer.on('end', () => {
          if (Object.keys(answer.trailers).length > 0) outgoing.addTrailers(answer.trailers)
          outgoing.end()
        })
      })
      forward.end(body)
    })
  })
  return await listening(t, server)
}

// A server the project did not write: it answers every request with `body` and the fields `send` gives.
async function handWritten (t: Tap, send: (request: IncomingMessage, response: ServerResponse) => void): Promise<string> {
  return await listening(t, createServer((request, response) => {
    request.resume()
    request.on('end', () => { send(request, response) })
  }))
}

const json = { 'content-type': 'application/json' }
const hello = '{"hello": "world"}'

t.test('a request gets a Content-Digest of its bytes, which the plugin verifies, with request(), fetch(), stream() and pipeline()', async (t) => {
  const { origin, seen } = await pluginServer(t)
  const { dispatcher, retries } = client(t)
  const viaRequest = await request(`${origin}/echo`, { method: 'POST', dispatcher, headers: json, body: hello })
  t.equal(viaRequest.statusCode, 200)
  t.same(await viaRequest.body.json(), { received: { hello: 'world' } })
  const viaFetch = await fetch(`${origin}/echo`, { method: 'POST', dispatcher, headers: json, body: hello })
  t.equal(viaFetch.status, 200)
  t.same(await viaFetch.json(), { received: { hello: 'world' } })
  const chunks: Buffer[] = []
  await stream(`${origin}/echo`, { method: 'POST', dispatcher, headers: json, body: Buffer.from(hello) }, () => new Writable({
    write (chunk: Buffer, _encoding, callback) { chunks.push(chunk); callback() }
  }))
  t.same(JSON.parse(Buffer.concat(chunks).toString()), { received: { hello: 'world' } })
  const piped: Buffer[] = []
  await streamPipeline(
    Readable.from([Buffer.from(hello)]),
    (await import('undici')).pipeline(`${origin}/echo`, { method: 'POST', dispatcher, headers: json }, ({ body }) => body),
    new Writable({ write (chunk: Buffer, _encoding, callback) { piped.push(chunk); callback() } })
  )
  t.same(JSON.parse(Buffer.concat(piped).toString()), { received: { hello: 'world' } })
  t.same(seen, [['content-digest'], ['content-digest'], ['content-digest'], ['content-digest']], 'the plugin verified every request')
  t.same(retries, [])
})

t.test('a server that supports only sha-512 gets one retry with sha-512; one that offers nothing this client has gets none', async (t) => {
  const sha512Only = await pluginServer(t, { algorithms: ['sha-512'] })
  const { dispatcher, retries } = client(t)
  const response = await request(`${sha512Only.origin}/echo`, { method: 'POST', dispatcher, headers: json, body: hello })
  t.equal(response.statusCode, 200)
  await response.body.dump()
  t.same(retries.map(({ problem, attempt, algorithm }) => [problem.kind, attempt, algorithm]), [['unsupported-algorithm', 1, 'sha-512']])
  t.same(sha512Only.seen, [['content-digest']])

  const shaOnly = await pluginServer(t, { algorithms: ['sha'], problemTypes: 'registered' })
  const refused = await request(`${shaOnly.origin}/echo`, { method: 'POST', dispatcher, headers: json, body: hello })
  t.equal(refused.statusCode, 400, 'the problem comes back as it was sent')
  t.equal(refused.headers['want-content-digest'], 'sha=10, sha-256=0')
  const problem = DigestProblemError.from(refused.statusCode, refused.headers, await refused.body.text())
  t.equal(problem?.kind, 'unsupported-algorithm')
  t.equal(problem?.document.type, problemTypes + 'digest-unsupported-algorithms')
  t.equal(retries.length, 1, 'no second retry')
})

t.test('a request body changed on the way is sent once more, unchanged; changed every time, the second problem comes back', async (t) => {
  for (const problemTypesShape of ['draft-00', 'registered'] as const) {
    const { origin, seen } = await pluginServer(t, { problemTypes: problemTypesShape })
    const once = await corruptingProxy(t, origin, (attempt) => attempt === 1)
    const { dispatcher, retries } = client(t)
    const fixed = await fetch(`${once}/echo`, { method: 'POST', dispatcher, headers: json, body: hello })
    t.equal(fixed.status, 200, problemTypesShape)
    t.same(await fixed.json(), { received: { hello: 'world' } })
    t.same(retries.map(({ problem, algorithm }) => [problem.kind, algorithm]), [['mismatching-value', 'sha-256']])

    const always = await corruptingProxy(t, origin, () => true)
    const failed = await request(`${always}/echo`, { method: 'POST', dispatcher, headers: json, body: hello })
    t.equal(failed.statusCode, 400)
    t.equal(DigestProblemError.from(failed.statusCode, failed.headers, await failed.body.json())?.kind, 'mismatching-value')
    t.equal(retries.length, 2, 'one retry for each request')
    t.same(seen, [['content-digest']], 'only the intact attempt reached the handler')
  }
})

t.test('an invalid value is never retried, nor a body that cannot be sent again, nor with maxRetries 0', async (t) => {
  const { origin } = await pluginServer(t)
  const { dispatcher, retries } = client(t, { maxBufferedBody: 4 })
  const invalid = await request(`${origin}/echo`, { method: 'POST', dispatcher, headers: { ...json, 'content-digest': 'sha-256=:AAAA:' }, body: hello })
  t.equal(invalid.statusCode, 400)
  t.equal(DigestProblemError.from(invalid.statusCode, invalid.headers, await invalid.body.text())?.kind, 'invalid-value')

  // Over maxBufferedBody, a stream is sent as it comes: no digest, which the required route refuses.
  const streamed = await request(`${origin}/echo`, { method: 'POST', dispatcher, headers: json, body: Readable.from([Buffer.from(hello)]) })
  t.equal(streamed.statusCode, 400)
  t.match(await streamed.body.json(), { type: 'about:blank', detail: /requires a Content-Digest/ })

  const never = client(t, { maxRetries: 0 })
  const sha512Only = await pluginServer(t, { algorithms: ['sha-512'] })
  const refused = await request(`${sha512Only.origin}/echo`, { method: 'POST', dispatcher: never.dispatcher, headers: json, body: hello })
  t.equal(refused.statusCode, 400)
  await refused.body.dump()
  t.same([retries, never.retries], [[], []])
})

t.test('a response body changed on the way errors in place of its end, with the digest in the header or the trailer section', async (t) => {
  const app = Fastify()
  await app.register(fastifyDigestFields)
  const content = Buffer.alloc(100_000, 'x')
  app.get('/buffer', async () => content)
  app.get('/stream', async (_request, reply) => reply.send(Readable.from([content.subarray(0, 50_000), content.subarray(50_000)])))
  const origin = await app.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => app.close())
  const proxy = await corruptingProxy(t, origin, () => false, 70_000)
  const { dispatcher } = client(t, { want: ['content-digest', 'repr-digest'] })
  for (const path of ['/buffer', '/stream']) {
    const intact = await request(`${origin}${path}`, { dispatcher })
    t.ok(Buffer.from(await intact.body.arrayBuffer()).equals(content), `${path}: intact`)
    const changed = await request(`${proxy}${path}`, { dispatcher })
    t.equal(changed.statusCode, 200)
    const error = await changed.body.arrayBuffer().then(() => null, (error: unknown) => error)
    t.ok(error instanceof DigestMismatchError, `${path}: the body errors`)
    t.match(error, { field: 'content-digest', algorithm: 'sha-256' })
    t.equal((error as DigestMismatchError).expected.toString('base64'), sha('sha256', content), 'expected is what the server sent')
    const viaFetch = await fetch(`${proxy}${path}`, { dispatcher })
    await t.rejects(viaFetch.arrayBuffer(), `${path}: fetch() never gives the complete body`)
  }
})

t.test('digests from a server the project did not write: header and trailer section, Unencoded-Digest of gzip, Repr-Digest of a 206', async (t) => {
  const content = Buffer.from('a response the server wrote by hand\n'.repeat(500))
  const gzipped = gzipSync(content)
  const origin = await handWritten(t, (request, response) => {
    const wrong = request.url?.includes('wrong') === true
    const body = wrong ? Buffer.concat([content.subarray(1), Buffer.from('!')]) : content
    switch (request.url?.replace('-wrong', '')) {
      case '/header': response.writeHead(200, { 'content-digest': field('sha-512', content) }).end(body); break
      case '/trailer':
        response.writeHead(200, { trailer: 'Content-Digest' })
        response.write(body)
        response.addTrailers({ 'content-digest': field('sha-256', content) })
        response.end()
        break
      case '/gzip': {
        // Content-Digest is of the bytes sent, right either way: only Unencoded-Digest tells.
        const sent = wrong ? gzipSync(body) : gzipped
        response.writeHead(200, { 'content-encoding': 'gzip', 'unencoded-digest': field('sha-256', content), 'content-digest': field('sha-256', sent) })
        response.end(sent)
        break
      }
      case '/partial':
        response.writeHead(206, { 'content-range': `bytes 0-9/${content.length}`, 'repr-digest': field('sha-256', content), 'content-digest': field('sha-256', content.subarray(0, 10)) })
        response.end(wrong ? body.subarray(0, 10) : content.subarray(0, 10))
        break
      default: response.writeHead(200, { 'content-digest': 'sha-256=:not base64!:, md5=:AAAA:' }).end(body)
    }
  })
  const { dispatcher } = client(t)
  for (const path of ['/header', '/trailer', '/gzip', '/partial', '/malformed']) {
    const response = await request(origin + path, { dispatcher })
    t.ok((await response.body.arrayBuffer()).byteLength > 0, `${path}: passes`)
  }
  for (const [path, field] of [['/header', 'content-digest'], ['/trailer', 'content-digest'], ['/gzip', 'unencoded-digest'], ['/partial', 'content-digest']]) {
    const response = await request(`${origin}${path}-wrong`, { dispatcher })
    await t.rejects(response.body.arrayBuffer(), { name: 'DigestMismatchError', field }, `${path}: fails`)
  }
  const strict = client(t, { unverifiable: 'require' })
  const malformed = await request(`${origin}/malformed`, { dispatcher: strict.dispatcher })
  await t.rejects(malformed.body.text(), new DigestUnverifiableError('content-digest does not parse'))
  const partial = await request(`${origin}/partial`, { dispatcher: strict.dispatcher })
  t.equal((await partial.body.text()).length, 10, 'a 206 is verified by its Content-Digest alone')
})

t.test('options are checked when the interceptor is made', async (t) => {
  for (const options of [{ algorithms: ['md5'] }, { algorithms: [] }, { requestDigest: 'digest' }, { want: ['digest'] }, { unverifiable: 'no' },
    { maxRetries: -1 }, { maxRetries: 1.5 }, { onRetry: 'log' }, { maxBufferedBody: Infinity }]) {
    t.throws(() => digestInterceptor(options as DigestInterceptorOptions), { name: 'TypeError', code: 'FST_DIGEST_FIELDS_INVALID_OPTION' }, JSON.stringify(options))
  }
})
