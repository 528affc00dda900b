import t from 'tap'
import Fastify from 'fastify'
import fastifyDigestFields, { digestProblemSchemas } from '../../lib/index.js'
import { hello, json, member } from '../helpers.js'

t.test('every problem the plugin sends is valid against its exported schema', async (t) => {
  const app = Fastify()
  await app.register(fastifyDigestFields)
  app.post('/', async () => 'ok')
  // A route that validates request bodies against each schema, with Fastify's own validator.
  const checker = Fastify()
  for (const [name, schema] of Object.entries(digestProblemSchemas)) {
    checker.post(`/${name}`, { schema: { body: { ...schema, additionalProperties: false } } }, async () => 'valid')
  }
  const cases: Array<[keyof typeof digestProblemSchemas, Record<string, string>]> = [
    ['unsupportedAlgorithm', { 'content-digest': 'md5=:AAAA:' }],
    ['invalidValue', { 'content-digest': 'sha-256=:AAAA:' }],
    ['mismatchingValue', { 'content-digest': member('sha-256', 'x') }],
    ['general', { 'content-digest': '=' }]
  ]
  for (const [name, headers] of cases) {
    const problem = await app.inject({ method: 'POST', url: '/', payload: hello, headers: { ...json, ...headers } })
    t.equal(problem.statusCode, 400)
    const checked = await checker.inject({ method: 'POST', url: `/${name}`, payload: problem.body, headers: json })
    t.equal(checked.body, 'valid', `${name}: ${problem.body}`)
  }
})

t.test('the schemas serve in an application route response schema', async (t) => {
  const app = Fastify()
  await app.register(fastifyDigestFields)
  app.post('/', {
    schema: { response: { 400: digestProblemSchemas.mismatchingValue } }
  }, async (_request, reply) => reply.code(400).type('application/problem+json').send({
    type: 'https://example.com/p#digest-mismatching-value', title: 'Mismatching Digest Value', algorithm: 'sha-256', secret: 'dropped'
  }))
  const response = await app.inject({ method: 'POST', url: '/', payload: hello, headers: json })
  t.same(response.json(), { type: 'https://example.com/p#digest-mismatching-value', title: 'Mismatching Digest Value', algorithm: 'sha-256' })
})
