import t from 'tap'
import Fastify from 'fastify'
import fastifyDigestFields, { type FastifyDigestFieldsOptions } from '../../lib/index.js'
import { buildApp, hello, helloSha256, helloSha512, json, member, problemTypes } from '../helpers.js'

async function register (options: unknown): Promise<void> {
  const app = Fastify()
  await app.register(fastifyDigestFields, options as FastifyDigestFieldsOptions)
  await app.ready()
}

t.test('exports the plugin as default and by name, wrapped with fastify-plugin', async (t) => {
  const module = await import('../../lib/index.js')
  t.equal(module.default, module.fastifyDigestFields)
  const meta = (module.default as unknown as Record<symbol, { name: string, fastify: string }>)[Symbol.for('plugin-meta')]
  t.same(meta, { name: 'fastify-digest-fields', fastify: '5.x || 6.x' })
})

t.test('rejects bad options at registration with a message naming the bad value', async (t) => {
  const cases: Array<[unknown, RegExp]> = [
    [{ algorithms: ['sha-256', 'sha256'] }, /unknown algorithm 'sha256'/],
    [{ algorithms: ['crc32c'] }, /algorithm 'crc32c' is registered for digest fields but is not a hash/],
    [{ algorithms: [] }, /at least one algorithm/],
    [{ algorithms: 'sha-256' }, /algorithms must be an array .* got 'sha-256'/],
    [{ algorithms: ['sha-256', 'sha-256'] }, /'sha-256' is listed twice/],
    [{ algorithms: { 'sha-256': 0 } }, /weight of 'sha-256' must be an integer from 1 to 10, got 0/],
    [{ algorithms: { 'sha-512': 11 } }, /got 11/],
    [{ algorithms: { 'sha-512': 2.5 } }, /got 2.5/],
    [{ strictAlgorithms: 'yes' }, /strictAlgorithms must be true or false, got 'yes'/],
    [{ required: 1 }, /required must be true or false, got 1/],
    [{ disclosure: 'some' }, /disclosure must be one of full, no-calculated-digest, none, got 'some'/],
    [{ problemLogLevel: 'notice' }, /problemLogLevel must be one of fatal, error, warn, info, debug, trace, silent, got 'notice'/],
    [{ problemTypesBase: 'not a uri' }, /problemTypesBase must be an absolute URI without a fragment, got 'not a uri'/],
    [{ problemTypesBase: 'https://example.com/problems#x' }, /without a fragment/],
    [{ algorithm: ['sha-256'] }, /unknown option 'algorithm'/],
    [{ algorithms: [7] }, /unknown algorithm 7 /],
    [{ strictAlgorithms: Symbol('yes') }, /strictAlgorithms must be true or false, got Symbol\(yes\)/],
    [{ stallTimeout: 0 }, /stallTimeout must be a whole number of milliseconds from 1 to 2147483647, got 0/],
    [{ stallTimeout: 2 ** 31 }, /got 2147483648/],
    [{ stallTimeout: 1.5 }, /got 1.5/],
    [{ stallTimeout: '10s' }, /got '10s'/]
  ]
  for (const [options, message] of cases) {
    await t.rejects(register(options), message, JSON.stringify(options))
  }
})

t.test('rejects a bad config.digest when the route is declared, naming the route', async (t) => {
  const app = Fastify()
  await app.register(fastifyDigestFields)
  t.throws(
    () => app.put('/items/:id', { config: { digest: { algorithms: ['sha-1' as 'sha'] } } }, async () => 'ok'),
    /config\.digest of PUT \/items\/:id: unknown algorithm 'sha-1'/
  )
  t.throws(
    () => app.put('/other', { config: { digest: true as unknown as false } }, async () => 'ok'),
    /config\.digest of PUT \/other: expected an options object, got true/
  )
  t.throws(
    () => app.route({ method: ['POST', 'PUT'], url: '/both', config: { digest: { required: 'no' as unknown as boolean } }, handler: async () => 'ok' }),
    /config\.digest of POST,PUT \/both: required must be true or false, got 'no'/
  )
})

t.test('a route overrides the plugin defaults under config.digest', async (t) => {
  const app = Fastify()
  await app.register(fastifyDigestFields, { algorithms: ['sha-512', 'sha-256'] })
  app.put('/items/:id', { config: { digest: { algorithms: ['sha-512'] } } }, async (request) => request.digest?.fields)
  app.put('/any/:id', async (request) => request.digest?.fields)

  const onlySha512 = await app.inject({ method: 'PUT', url: '/items/1', payload: hello, headers: { ...json, 'content-digest': helloSha256 } })
  t.equal(onlySha512.json()['unsupported-algorithm'], 'sha-256')
  t.equal(onlySha512.headers['want-content-digest'], 'sha-512=10, sha-256=0')
  const sha512 = await app.inject({ method: 'PUT', url: '/items/1', payload: hello, headers: { ...json, 'content-digest': helloSha512 } })
  t.equal(sha512.statusCode, 200)
  const defaults = await app.inject({ method: 'PUT', url: '/any/1', payload: hello, headers: { ...json, 'content-digest': helloSha256 } })
  t.equal(defaults.statusCode, 200)
})

t.test('weights given as an object are advertised as given, most preferred first', async (t) => {
  const { app } = await buildApp({ algorithms: { 'sha-256': 3, 'sha-512': 7 } })
  const response = await app.inject({ method: 'POST', url: '/', payload: hello, headers: { ...json, 'repr-digest': 'md5=:AAAA:' } })
  t.equal(response.headers['want-repr-digest'], 'sha-512=7, sha-256=3, md5=0')
})

t.test('config.digest false switches the plugin off for that route', async (t) => {
  const app = Fastify()
  await app.register(fastifyDigestFields)
  let handled = 0
  app.get('/health', { config: { digest: false } }, async (request) => { handled++; return { digest: request.digest } })
  app.post('/raw', { config: { digest: false } }, async (request) => { handled++; return request.body })
  const health = await app.inject({ method: 'GET', url: '/health', headers: { 'want-repr-digest': 'md5=9', 'content-digest': 'garbage=' } })
  t.equal(health.statusCode, 200)
  t.same(health.json(), { digest: null })
  const raw = await app.inject({ method: 'POST', url: '/raw', payload: hello, headers: { ...json, 'content-digest': member('sha-256', 'x') } })
  t.equal(raw.statusCode, 200)
  t.equal(handled, 2)
})

t.test('applies to routes in child scopes declared after registration', async (t) => {
  const app = Fastify()
  await app.register(fastifyDigestFields)
  await app.register(async (child) => {
    child.post('/child', async () => 'ok')
  }, { prefix: '/api' })
  const response = await app.inject({ method: 'POST', url: '/api/child', payload: hello, headers: { ...json, 'content-digest': member('sha-256', 'x') } })
  t.equal(response.json().type, problemTypes + 'digest-mismatching-value')
})

t.test('problemTypesBase changes the type URIs', async (t) => {
  const { app } = await buildApp({ problemTypesBase: 'https://example.com/problems' })
  const response = await app.inject({ method: 'POST', url: '/', payload: hello, headers: { ...json, 'content-digest': 'sha-256=:AAAA:' } })
  t.equal(response.json().type, 'https://example.com/problems#digest-invalid-value')
})

t.test('required: a request with content and no verifiable integrity field gets a problem advertising the algorithms', async (t) => {
  const { app, calls } = await buildApp({ required: true })
  app.get('/resource', async () => 'representation')
  const missing = await app.inject({ method: 'POST', url: '/', payload: hello, headers: json })
  t.equal(missing.statusCode, 400)
  t.equal(missing.headers['content-type'], 'application/problem+json')
  t.same(missing.json(), {
    type: 'about:blank',
    title: 'Bad Request',
    detail: 'this resource requires a Content-Digest, Repr-Digest or Unencoded-Digest field with one of: sha-256, sha-512'
  })
  t.equal(missing.headers['want-content-digest'], 'sha-256=10, sha-512=9')
  t.equal(missing.headers['want-repr-digest'], 'sha-256=10, sha-512=9')
  t.equal(missing.headers['want-unencoded-digest'], 'sha-256=10, sha-512=9')

  const onlyWant = await app.inject({ method: 'POST', url: '/', payload: hello, headers: { ...json, 'want-content-digest': 'sha-256=1' } })
  t.equal(onlyWant.statusCode, 400)
  const ok = await app.inject({ method: 'POST', url: '/', payload: hello, headers: { ...json, 'repr-digest': helloSha512 } })
  t.equal(ok.statusCode, 200)
  // No content, nothing to require.
  const bodiless = await app.inject({ method: 'GET', url: '/resource' })
  t.equal(bodiless.statusCode, 200)
  const empty = await app.inject({ method: 'POST', url: '/', headers: { 'content-length': '0' } })
  t.equal(empty.statusCode, 200)
  t.equal(calls.handler, 2)
})

t.test('required: a Repr-Digest of a partial request does not count, since it cannot be checked', async (t) => {
  const { app } = await buildApp({ required: true })
  app.patch('/upload', async () => 'ok')
  const headers = { 'content-type': 'text/plain', 'content-range': 'bytes 0-4/10', 'repr-digest': member('sha-256', 'helloworld') }
  const reprOnly = await app.inject({ method: 'PATCH', url: '/upload', payload: 'hello', headers })
  t.equal(reprOnly.statusCode, 400)
  const withContent = await app.inject({ method: 'PATCH', url: '/upload', payload: 'hello', headers: { ...headers, 'content-digest': member('sha-256', 'hello') } })
  t.equal(withContent.statusCode, 200)
})

t.test('required can be set per route', async (t) => {
  const app = Fastify()
  await app.register(fastifyDigestFields)
  app.put('/strict', { config: { digest: { required: true } } }, async () => 'ok')
  app.put('/lax', async () => 'ok')
  t.equal((await app.inject({ method: 'PUT', url: '/strict', payload: hello, headers: json })).statusCode, 400)
  t.equal((await app.inject({ method: 'PUT', url: '/lax', payload: hello, headers: json })).statusCode, 200)
})
