// The README's OpenAPI recipe, in depth, through @fastify/swagger: the problems are documented under
// application/problem+json, the media type the plugin sends, and the route still answers them.
import t from 'tap'
import Fastify from 'fastify'
import fastifySwagger from '@fastify/swagger'
import fastifyDigestFields, { digestProblemSchemas } from '../../lib/index.js'
import { hello, helloSha256, json, member, problemTypes } from '../helpers.js'

const { unsupportedAlgorithm, invalidValue, mismatchingValue, general } = digestProblemSchemas

async function buildDocumentedApp () {
  const app = Fastify()
  await app.register(fastifySwagger, { openapi: { info: { title: 'items', version: '1.0.0' } } })
  await app.register(fastifyDigestFields)
  app.put('/items/:id', {
    config: { digest: { required: true } },
    schema: {
      response: {
        200: { type: 'object', properties: { id: { type: 'string' } } },
        400: {
          description: 'The content failed its digest check: an RFC 9457 problem',
          content: {
            'application/problem+json': { schema: { oneOf: [unsupportedAlgorithm, invalidValue, mismatchingValue, general] } }
          }
        }
      }
    }
  }, async (request) => ({ id: (request.params as { id: string }).id }))
  await app.ready()
  return app
}

t.test('the OpenAPI document lists the problems under application/problem+json', async (t) => {
  const app = await buildDocumentedApp()
  const document = app.swagger() as unknown as {
    paths: Record<string, Record<string, { responses: Record<string, { description: string, content: Record<string, { schema: { oneOf: Array<{ title: string }> } }> }> }>>
  }
  const problem = document.paths['/items/{id}']?.put?.responses['400']
  t.same(Object.keys(problem?.content ?? {}), ['application/problem+json'])
  t.same(problem?.content['application/problem+json']?.schema.oneOf.map(({ title }) => title),
    ['digest-unsupported-algorithm', 'digest-invalid-value', 'digest-mismatching-value', 'about:blank'])
  t.equal(problem?.description, 'The content failed its digest check: an RFC 9457 problem')
})

t.test('the documented route answers each problem it documents, and Fastify its own 400s', async (t) => {
  const app = await buildDocumentedApp()
  const put = (headers: Record<string, string>, payload = hello) => app.inject({ method: 'PUT', url: '/items/1', payload, headers: { ...json, ...headers } })

  const ok = await put({ 'content-digest': helloSha256 })
  t.equal(ok.statusCode, 200)
  t.same(ok.json(), { id: '1' })

  const cases: Array<[Record<string, string>, string]> = [
    [{ 'content-digest': 'md5=:AAAA:' }, problemTypes + 'digest-unsupported-algorithm'],
    [{ 'content-digest': 'sha-256=:AAAA:' }, problemTypes + 'digest-invalid-value'],
    [{ 'content-digest': member('sha-256', 'other') }, problemTypes + 'digest-mismatching-value'],
    [{}, 'about:blank']
  ]
  for (const [headers, type] of cases) {
    const response = await put(headers)
    t.equal(response.statusCode, 400, type)
    t.equal(response.headers['content-type'], 'application/problem+json', type)
    t.equal(response.json().type, type)
  }

  const badJson = await put({ 'content-digest': member('sha-256', '{') }, '{')
  t.equal(badJson.statusCode, 400)
  t.equal(badJson.json().code, 'FST_ERR_CTP_INVALID_JSON_BODY')
})
