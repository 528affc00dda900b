import t from 'tap'
import Fastify from 'fastify'
import fastifyDigestFields from '../../lib/index.js'
import { hello, helloSha256, json, listen, member, problemTypes, rawRequest } from '../helpers.js'

// Every route in the plugin's scope is verified, whatever the order of declaration, and so is the
// not-found handler; the application can register the plugin as it registers any other.

const wrong = member('sha-256', 'tampered')

t.test('a route declared before the plugin finished registering is verified with the plugin defaults, and said so', async (t) => {
  // Before, `app.register(plugin); app.post(...)` without await let a wrong digest through silently.
  const warnings: string[] = []
  const app = Fastify({ logger: { level: 'warn', stream: { write: (line: string) => warnings.push(JSON.parse(line).msg) } } })
  app.register(fastifyDigestFields, { required: true })
  let handled = 0
  app.post('/early', { config: { digest: false } }, async (request) => { handled++; return request.body })
  await app.ready()

  const mismatch = await app.inject({ method: 'POST', url: '/early', payload: hello, headers: { ...json, 'content-digest': wrong } })
  t.equal(mismatch.statusCode, 400)
  t.equal(mismatch.json().code, 'FST_DIGEST_FIELDS_MISMATCHING_VALUE', "answered by the application's error handler")
  const missing = await app.inject({ method: 'POST', url: '/early', payload: hello, headers: json })
  t.equal(missing.statusCode, 400, 'the plugin default required holds')
  t.equal(handled, 0)
  const right = await app.inject({ method: 'POST', url: '/early', payload: hello, headers: { ...json, 'content-digest': helloSha256 } })
  t.equal(right.statusCode, 200)
  t.equal(handled, 1)
  t.same(warnings, [
    'fastify-digest-fields: POST /early was declared before the plugin was registered, so its config.digest is not read: it is checked with the plugin defaults and its problems are answered by the application\'s error handler. Declare routes after `await fastify.register(fastifyDigestFields)`.'
  ], 'one warning for the route, however many requests')
})

t.test('the not-found handler is verified with the plugin defaults', async (t) => {
  const app = Fastify()
  await app.register(fastifyDigestFields)
  let handled = 0
  app.setNotFoundHandler(async (request, reply) => {
    handled++
    return reply.code(404).send({ body: request.body })
  })
  const mismatch = await app.inject({ method: 'POST', url: '/nowhere', payload: hello, headers: { ...json, 'content-digest': wrong } })
  t.equal(mismatch.statusCode, 400)
  t.equal(handled, 0)
  const right = await app.inject({ method: 'POST', url: '/nowhere', payload: hello, headers: { ...json, 'content-digest': helloSha256 } })
  t.equal(right.statusCode, 404)
  t.same(right.json(), { body: { hello: 'world' } })

  const plain = Fastify()
  await plain.register(fastifyDigestFields)
  const fallback = await plain.inject({ method: 'POST', url: '/nowhere', payload: hello, headers: { ...json, 'content-digest': wrong } })
  t.equal(fallback.statusCode, 400, "Fastify's own not-found handler too")
})

t.test("Fastify's register options are accepted and left to Fastify", async (t) => {
  // Before, { logLevel: 'warn' } threw "unknown option".
  const app = Fastify()
  await app.register(fastifyDigestFields, { logLevel: 'warn', prefix: '/ignored', logSerializers: {}, algorithms: ['sha-512'] } as never)
  app.post('/', async () => 'ok')
  const response = await app.inject({ method: 'POST', url: '/', payload: hello, headers: { ...json, 'content-digest': helloSha256 } })
  t.equal(response.statusCode, 400, 'the digest options still apply')
  t.equal(response.json().type, problemTypes + 'digest-unsupported-algorithm')
})

t.test('registering again in a child scope sets that scope\'s defaults', async (t) => {
  // Before, the second registration threw FST_ERR_DEC_ALREADY_PRESENT.
  const app = Fastify()
  await app.register(fastifyDigestFields, { algorithms: ['sha-256'] })
  app.post('/outer', async () => 'outer')
  await app.register(async (child) => {
    await child.register(fastifyDigestFields, { algorithms: ['sha-512'], required: true })
    child.post('/inner', async () => 'inner')
  })
  const send = (url: string, headers: Record<string, string>) => app.inject({ method: 'POST', url, payload: hello, headers: { ...json, ...headers } })
  t.equal((await send('/outer', { 'content-digest': helloSha256 })).statusCode, 200)
  t.equal((await send('/outer', {})).statusCode, 200)
  t.equal((await send('/inner', { 'content-digest': helloSha256 })).json().type, problemTypes + 'digest-unsupported-algorithm')
  t.equal((await send('/inner', {})).json().detail, 'this resource requires a Content-Digest, Repr-Digest or Unencoded-Digest field with one of: sha-512')
  const inner = await send('/inner', { 'content-digest': member('sha-512', hello) })
  t.equal(inner.statusCode, 200)
  const mismatch = await send('/inner', { 'content-digest': member('sha-512', 'x') })
  t.equal(mismatch.json().type, problemTypes + 'digest-mismatching-value')
  // Response digests once, with the child's algorithms.
  const answered = await app.inject({ method: 'POST', url: '/inner', payload: hello, headers: { ...json, 'content-digest': member('sha-512', hello), 'want-repr-digest': 'sha-256=9, sha-512=1' } })
  t.equal(answered.headers.vary, 'Want-Repr-Digest')
  t.equal(answered.headers['repr-digest'], member('sha-512', 'inner'))
  // A chunked request the parent only watches for trailer fields is judged by the child's settings.
  const port = await listen(app)
  t.teardown(() => app.close())
  const chunked = (url: string) => rawRequest(port, [`POST ${url} HTTP/1.1`, 'Host: localhost', 'Content-Type: application/json', 'Transfer-Encoding: chunked'],
    [Buffer.from(`${hello.length.toString(16)}\r\n${hello}\r\n0\r\n\r\n`)])
  t.equal((await chunked('/outer')).status, 200)
  t.match(JSON.parse((await chunked('/inner')).body).detail, /requires a Content-Digest/)
})
