// Found by the attack on issue 29's common case: an async handler that calls reply.send() and
// returns nothing makes Fastify send a second time while the first send waits in the plugin's
// onSend hooks (for a response digest, or for the verdict). Whichever finishes last throws from
// writeHead, and so does a header value Node refuses. The plugin called Fastify's `done` from a
// promise, where that throw became an unhandled rejection and ended the process, on any route
// asked for a digest (or sending one unasked). It now goes back to Fastify, as from an async hook.
// The second send's pass also placed its fields (the digest of no content) on the reply the first
// then wrote: fields are now placed in the turn the reply is written. Since the fourth attack on
// issue 29 the later send is dropped at the route's first response hook, and logged
// (replies-sent-twice-at-once.test.ts).
import { createHash } from 'node:crypto'
import t from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import fastifyDigestFields from '../../lib/index.js'
import { h2Request, listen, member, rawRequest, type RawResponse, type Tap } from '../helpers.js'

const sha256 = (text: string): string => `sha-256=:${createHash('sha256').update(text).digest('base64')}:`
const content = Buffer.alloc(5000, 'x')

interface Served { app: FastifyInstance, port: number, settled: Promise<string> }

/**
 * A server whose routes send twice or set a refused header, and a promise of how the send that
 * threw ended: the record Fastify logs once it had the error, or the error that escaped to the process.
 */
async function serve (t: Tap, plugin: boolean, http2 = false): Promise<Served> {
  let settle = (_how: string): void => {}
  const settled = new Promise<string>((resolve) => { settle = resolve })
  const stream = {
    write (line: string): void {
      const record = JSON.parse(line) as { err?: { message: string }, msg: string }
      if (record.err !== undefined) settle(`logged: ${record.err.message}`)
      else if (record.msg.includes('twice')) settle(`logged: ${record.msg}`)
    }
  }
  const escaped = (error: unknown): void => { settle(`escaped: ${(error as Error).message}`) }
  process.on('unhandledRejection', escaped)
  process.on('uncaughtExceptionMonitor', escaped)
  t.teardown(() => {
    process.off('unhandledRejection', escaped)
    process.off('uncaughtExceptionMonitor', escaped)
  })
  const app = Fastify({ http2, logger: { level: 'warn', stream } } as object) as unknown as FastifyInstance
  if (plugin) await app.register(fastifyDigestFields)
  app.addContentTypeParser('application/octet-stream', (_request, payload, done) => { done(null, payload) })
  app.get('/send-only', async (_request, reply) => { reply.send({ ok: 1 }) })
  app.get('/unasked', { config: { digest: { responseDigests: ['content-digest'] } } }, async (_request, reply) => { reply.send({ ok: 1 }) })
  app.get('/send-and-return', async (_request, reply) => {
    reply.send({ ok: 1 })
    return { other: 2 }
  })
  app.get('/refused-header', async (_request, reply) => {
    reply.header('x-refused', 'a\u0001b')
    return { ok: 1 }
  })
  // Replies before the content ended: the reply waits for the verdict, and so does the second send.
  app.post('/early', async (_request, reply) => { reply.send({ ok: 1 }) })
  app.get('/next', async () => ({ next: true }))
  t.teardown(() => app.close())
  return { app, port: await listen(app), settled }
}

const get = async (port: number, path: string, headers: readonly string[] = []): Promise<RawResponse> =>
  await rawRequest(port, [`GET ${path} HTTP/1.1`, 'Host: localhost', ...headers])

const cases = [
  ['a send without return, asked for a Repr-Digest', '/send-only', ['Want-Repr-Digest: sha-256=1'], 'repr-digest'],
  ['a send without return, on a route that sends Content-Digest unasked', '/unasked', [], 'content-digest'],
  ['a send and another payload returned, asked for a Content-Digest', '/send-and-return', ['Want-Content-Digest: sha-256=1'], 'content-digest']
] as const

for (const [name, path, headers, field] of cases) {
  t.test(`${name}: the first payload goes with its digest, the second send is logged, the process goes on`, async (t) => {
    const { port, settled } = await serve(t, true)
    const response = await get(port, path, headers)
    t.equal(response.status, 200)
    t.equal(response.body, '{"ok":1}')
    t.equal(response.headers[field], sha256('{"ok":1}'), 'the digest of the bytes sent (node:crypto)')
    t.equal(response.headers.vary, headers.length === 0 ? undefined : headers[0].split(':')[0])
    t.match(await settled, /^logged: fastify-digest-fields: \w+ \/\S+ sent its reply twice/)
    t.equal((await get(port, '/next')).status, 200, 'the server still answers')
  })
}

t.test('a header value Node refuses, on a route asked for a digest: answered as Fastify answers it without the plugin', async (t) => {
  const bare = await serve(t, false)
  const expected = await get(bare.port, '/refused-header', ['Want-Repr-Digest: sha-256=1'])
  t.equal(expected.status, 500, 'Fastify alone')
  const { port, settled } = await serve(t, true)
  const response = await get(port, '/refused-header', ['Want-Repr-Digest: sha-256=1'])
  t.equal(response.status, expected.status)
  t.match(await settled, /^logged: Invalid character in header content/)
  t.equal((await get(port, '/next')).status, 200, 'the server still answers')
})

for (const http2 of [false, true]) {
  t.test(`a send without return before the content ended, over HTTP/${http2 ? '2' : '1.1'}: one reply once verified, with its own digest`, async (t) => {
    const { port, settled } = await serve(t, true, http2)
    const chunks = [content.subarray(0, 100), content.subarray(100)]
    const response = http2
      ? await h2Request(port, { ':method': 'POST', ':path': '/early', 'content-type': 'application/octet-stream', 'content-digest': member('sha-256', content), 'want-repr-digest': 'sha-256=1' }, chunks)
      : await rawRequest(port, ['POST /early HTTP/1.1', 'Host: localhost', 'Content-Type: application/octet-stream',
        `Content-Length: ${content.length}`, `Content-Digest: ${member('sha-256', content)}`, 'Want-Repr-Digest: sha-256=1'], chunks)
    t.equal(response.status, 200)
    t.equal(response.body, '{"ok":1}')
    t.equal(response.headers['repr-digest'], sha256('{"ok":1}'), 'the digest of the bytes sent (node:crypto)')
    t.equal(response.headers.vary, 'Want-Repr-Digest')
    t.match(await settled, /^logged: fastify-digest-fields: \w+ \/\S+ sent its reply twice/)
    const next = http2 ? await h2Request(port, { ':path': '/next' }) : await get(port, '/next')
    t.equal(next.status, 200, 'the server still answers')
  })
}
