// The plugin's diagnostics_channel events: one `fastify-digest-fields:request:verified` for each
// request whose content matched, one `fastify-digest-fields:request:problem` for each problem
// answered, over inject() and a real socket (a digest in the trailer section); and nothing made
// while nobody subscribes.
import { channel, subscribe, unsubscribe } from 'node:diagnostics_channel'
import { connect } from 'node:net'
import t from 'tap'
import { DigestProblem } from '../../lib/index.js'
import { buildApp, hello, helloSha256, listen, member, problemTypes } from '../helpers.js'

const names = ['fastify-digest-fields:request:verified', 'fastify-digest-fields:request:problem'] as const

t.test('each verified request and each problem is published once, with the request', async (t) => {
  const messages: Array<[string, Record<string, unknown>]> = []
  const listeners = names.map((name) => [name, (message: unknown) => { messages.push([name, message as Record<string, unknown>]) }] as const)
  for (const [name, listener] of listeners) subscribe(name, listener)
  t.teardown(() => { for (const [name, listener] of listeners) unsubscribe(name, listener) })
  const { app } = await buildApp({ algorithms: ['sha-256', 'sha-512'] })
  t.teardown(() => app.close())
  const post = async (headers: Record<string, string>, payload = hello): Promise<number> =>
    (await app.inject({ method: 'POST', url: '/', payload, headers: { 'content-type': payload === '' ? 'text/plain' : 'application/json', ...headers } })).statusCode

  t.equal(await post({ 'content-digest': `${helloSha256}, ${member('sha-512', hello)}`, 'repr-digest': helloSha256 }), 200)
  t.equal(await post({}), 200, 'a request without fields')
  t.equal(await post({ 'content-digest': member('sha-256', 'other') }), 400)
  t.equal(await post({ 'content-digest': 'md5=:AAAAAAAAAAAAAAAAAAAAAA==:' }), 400)
  t.equal(await post({ 'content-digest': member('sha-256', '') }, ''), 200, 'empty content, judged before any is read')

  t.same(messages.map(([name, message]) => [name.split(':').pop(), (message.request as { id: string }).id]),
    [['verified', 'req-1'], ['problem', 'req-3'], ['problem', 'req-4'], ['verified', 'req-5']], 'one message a request that has one')
  const [verified, mismatch, unsupported, empty] = messages.map(([, message]) => message)
  t.same(verified, { request: verified?.request, fields: ['content-digest', 'repr-digest'], algorithms: ['sha-256', 'sha-512'] })
  t.ok(mismatch?.problem instanceof DigestProblem)
  t.match(mismatch, { problem: { statusCode: 400, type: `${problemTypes}digest-mismatching-value`, code: 'FST_DIGEST_FIELDS_MISMATCHING_VALUE' } })
  t.match(unsupported, { problem: { type: `${problemTypes}digest-unsupported-algorithm` } })
  t.same(empty?.fields, ['content-digest'])

  // Over a socket, a digest in the trailer section is published once the content ended.
  messages.length = 0
  const port = await listen(app)
  const socket = connect(port, '127.0.0.1')
  t.teardown(() => socket.destroy())
  socket.end(['POST / HTTP/1.1', 'Host: localhost', 'Content-Type: application/json', 'Transfer-Encoding: chunked',
    'Trailer: Content-Digest', 'Connection: close', '', `${hello.length.toString(16)}`, hello, '0', `Content-Digest: ${helloSha256}`, '', ''].join('\r\n'))
  let answer = ''
  for await (const chunk of socket) answer += String(chunk)
  t.match(answer, /^HTTP\/1\.1 200/)
  t.same(messages.map(([name, message]) => [name, message.fields]), [['fastify-digest-fields:request:verified', ['content-digest']]])
})

t.test('nothing is published, nor a message made, while nobody subscribes', async (t) => {
  const published: string[] = []
  for (const name of names) {
    const publish = channel(name).publish
    channel(name).publish = (message: unknown) => { published.push(name); publish.call(channel(name), message) }
    t.teardown(() => { channel(name).publish = publish })
  }
  const { app } = await buildApp()
  t.teardown(() => app.close())
  for (const digest of [helloSha256, member('sha-256', 'other')]) {
    await app.inject({ method: 'POST', url: '/', payload: hello, headers: { 'content-type': 'application/json', 'content-digest': digest } })
  }
  t.same(published, [])
  // The same count with a subscriber shows the spy sees what is published.
  const listener = (): void => {}
  subscribe(names[1], listener)
  t.teardown(() => unsubscribe(names[1], listener))
  await app.inject({ method: 'POST', url: '/', payload: hello, headers: { 'content-type': 'application/json', 'content-digest': member('sha-256', 'x') } })
  t.same(published, [names[1]])
})
