import { gzipSync } from 'node:zlib'
import t from 'tap'
import Fastify from 'fastify'
import fastifyDigestFields from '../../lib/index.js'
import { buildApp, hello, helloSha256, json, member, problemTypes } from '../helpers.js'

// One request for each way a request can fail, with what a full disclosure would reveal.
const failures: Array<[string, Record<string, string>]> = [
  ['unparsable field', { 'content-digest': 'sha-256=:AAA' }],
  ['bad preference', { 'want-repr-digest': 'sha-512=12' }],
  ['unsupported algorithm', { 'content-digest': 'md5=:AAAA:' }],
  ['unsupported preference', { 'want-content-digest': 'sha=4' }],
  ['invalid value', { 'repr-digest': 'sha-512=:AAAA:' }],
  ['mismatching value', { 'content-digest': member('sha-512', 'other') }],
  ['missing field', {}]
]

t.test('no-calculated-digest leaves calculated-digest out of a mismatch', async (t) => {
  const { app } = await buildApp({ disclosure: 'no-calculated-digest' })
  const response = await app.inject({ method: 'POST', url: '/', payload: hello, headers: { ...json, 'content-digest': member('sha-256', 'x') } })
  t.same(response.json(), {
    type: problemTypes + 'digest-mismatching-value',
    title: 'Mismatching Digest Value',
    algorithm: 'sha-256',
    'provided-digest': `:${member('sha-256', 'x').slice(9)}`
  })
})

t.test('disclosure none answers every failure with the same general problem and nothing else', async (t) => {
  const { app, calls } = await buildApp({ disclosure: 'none', required: true })
  const seen = new Set<string>()
  for (const [name, headers] of failures) {
    const response = await app.inject({ method: 'POST', url: '/', payload: hello, headers: { ...json, ...headers } })
    t.equal(response.statusCode, 400, name)
    t.equal(response.headers['content-type'], 'application/problem+json', name)
    t.equal(response.body, '{"type":"about:blank","title":"Bad Request"}', name)
    const fields = Object.keys(response.headers).filter((header) => header.includes('digest'))
    t.same(fields, [], `${name}: no digest field in the response`)
    seen.add(JSON.stringify([response.statusCode, response.body, Object.keys(response.headers).sort()]))
  }
  t.equal(seen.size, 1, 'the responses cannot be told apart')
  t.equal(calls.handler, 0)
  const ok = await app.inject({ method: 'POST', url: '/', payload: hello, headers: { ...json, 'content-digest': helloSha256 } })
  t.equal(ok.statusCode, 200)
})

t.test('full disclosure tells the failures apart', async (t) => {
  const { app } = await buildApp({ required: true })
  const bodies = new Set<string>()
  for (const [, headers] of failures) {
    const response = await app.inject({ method: 'POST', url: '/', payload: hello, headers: { ...json, ...headers } })
    bodies.add(response.body)
  }
  t.equal(bodies.size, failures.length)
})

// Issue 15, item 7: under disclosure none a decoding bomb was answered with its reason and the
// limit in a detail; every failure of the plugin is now the bare document of its status.
t.test('disclosure none tells nothing of a failure that is not a 400 either', async (t) => {
  const { app, calls } = await buildApp({ disclosure: 'none' }, { bodyLimit: 4096 })
  app.addContentTypeParser('application/octet-stream', { parseAs: 'buffer' }, (_request, body, done) => done(null, body))
  const bomb = gzipSync(Buffer.alloc(1024 * 1024))
  const response = await app.inject({
    method: 'POST', url: '/', payload: bomb, headers: { 'content-type': 'application/octet-stream', 'content-encoding': 'gzip', 'unencoded-digest': helloSha256 }
  })
  t.equal(response.statusCode, 413)
  t.equal(response.headers['content-type'], 'application/problem+json')
  t.equal(response.body, '{"type":"about:blank","title":"Content Too Large"}')
  t.equal(calls.handler, 0)
  const full = await buildApp({}, { bodyLimit: 4096 })
  full.app.addContentTypeParser('application/octet-stream', { parseAs: 'buffer' }, (_request, body, done) => done(null, body))
  const told = await full.app.inject({
    method: 'POST', url: '/', payload: bomb, headers: { 'content-type': 'application/octet-stream', 'content-encoding': 'gzip', 'unencoded-digest': helloSha256 }
  })
  t.same(told.json(), { type: 'about:blank', title: 'Content Too Large', detail: 'Unencoded-Digest cannot be verified: the content decodes to more than 4096 bytes' }, 'full disclosure says why')
})

// The second attack on issue 15: a route declared before the plugin finished registering leaves its
// problems to the application's error handler, and Fastify's default one sent the error's message,
// which named the check, the field and the algorithm. Under none the message is the status phrase.
t.test('disclosure none tells nothing through the application\'s error handler either', async (t) => {
  const app = Fastify()
  app.register(fastifyDigestFields, { disclosure: 'none' })
  app.post('/early', async () => 'stored')
  const bodies = new Set<string>()
  for (const [name, headers] of failures.filter(([name]) => name !== 'missing field')) {
    const response = await app.inject({ method: 'POST', url: '/early', payload: hello, headers: { ...json, ...headers } })
    t.equal(response.statusCode, 400, name)
    t.notMatch(response.body, /sha-|md5|-Digest|dictionary|preference|mismatch|unsupported|invalid/i, name)
    bodies.add(response.body)
  }
  t.equal(bodies.size, 1, [...bodies].join('\n'))
})
