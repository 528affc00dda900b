// The client's diagnostics_channel events: `fastify-digest-fields:client:verified` for a response
// whose body matched, `:client:failed` for one that failed its check, `:client:retry` for each
// retry after a digest problem; each with the request as origin, method and path.
import { subscribe, unsubscribe } from 'node:diagnostics_channel'
import { createServer } from 'node:http'
import t from 'tap'
import Fastify from 'fastify'
import { Agent, request } from 'undici'
import fastifyDigestFields from '../../lib/index.js'
import { digestInterceptor, DigestMismatchError, DigestProblemError } from '../../lib/client.js'
import { hello, member, serving } from '../helpers.js'

t.test('a verified response, a failed one and a retry are each published once', async (t) => {
  const messages: Array<[string, Record<string, unknown>]> = []
  for (const name of ['verified', 'failed', 'retry']) {
    const listener = (message: unknown): void => { messages.push([name, message as Record<string, unknown>]) }
    subscribe(`fastify-digest-fields:client:${name}`, listener)
    t.teardown(() => unsubscribe(`fastify-digest-fields:client:${name}`, listener))
  }
  const content = Buffer.from('a checked body')
  const origin = await serving(t, createServer((request, response) => {
    response.setHeader('content-digest', member('sha-256', request.url === '/wrong' ? 'other' : content))
    if (request.url?.startsWith('/right') === true) response.setHeader('repr-digest', `${member('sha-256', content)}, ${member('sha-512', content)}`)
    response.end(content)
  }))
  const dispatcher = new Agent().compose(digestInterceptor())
  t.teardown(() => dispatcher.close())

  await (await request(`${origin}/right?q=1`, { dispatcher })).body.text()
  const wrong = await request(`${origin}/wrong`, { dispatcher })
  await t.rejects(wrong.body.text(), DigestMismatchError)
  t.same(messages.map(([name]) => name), ['verified', 'failed'])
  t.same(messages[0]?.[1], {
    request: { origin, method: 'GET', path: '/right?q=1' }, fields: ['content-digest', 'repr-digest'], algorithms: ['sha-256', 'sha-512']
  })
  t.match(messages[1]?.[1], { request: { origin, method: 'GET', path: '/wrong' } })
  t.ok(messages[1]?.[1].error instanceof DigestMismatchError, 'the error the body failed with')

  // A server that takes sha-512 only: the request is sent again with it.
  messages.length = 0
  const app = Fastify()
  await app.register(fastifyDigestFields, { algorithms: ['sha-512'], required: true })
  app.post('/orders', async () => ({}))
  const server = await app.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => app.close())
  const answered = await request(`${server}/orders`, { method: 'POST', dispatcher, headers: { 'content-type': 'application/json' }, body: hello })
  t.equal(answered.statusCode, 200)
  await answered.body.dump()
  t.same(messages.map(([name]) => name), ['retry'], 'a response without digests is neither verified nor failed')
  t.match(messages[0]?.[1], { request: { origin: server, method: 'POST', path: '/orders' }, retry: { attempt: 1, algorithm: 'sha-512' } })
  t.ok((messages[0]?.[1].retry as { problem: unknown }).problem instanceof DigestProblemError)
})
