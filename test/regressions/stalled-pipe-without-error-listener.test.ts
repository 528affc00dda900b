// Found by the README-only attack on the common case (issue 29, ninth pass): a handler that pipes
// request.raw into a Writable of its own that stops taking bytes, and never listens for its errors.
// After stallTimeout the plugin destroyed that destination with FST_DIGEST_FIELDS_READER_STALLED,
// which nobody heard: Node threw it, and the process ended. Fastify alone answers and stays up.
// The destination is still destroyed with that error (its `errored` says why), but the plugin
// hears it when the application does not.
import { Writable } from 'node:stream'
import t from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import { request } from 'undici'
import fastifyDigestFields from '../../lib/index.js'
import { fuzzSeed, h2Request, listen, member, seededBytes, watchProcess, type Tap } from '../helpers.js'

t.comment(`seed ${fuzzSeed}`)
const body = seededBytes(300_000, fuzzSeed)
const wrong = `sha-256=:${Buffer.alloc(32).toString('base64')}:`

/** A Writable that takes one chunk and never asks for more, with no listener for its errors. */
function stuck (): Writable {
  return new Writable({ highWaterMark: 1024, write () {} })
}

async function server (t: Tap, destinations: Writable[], http2: boolean): Promise<number> {
  const app = Fastify({ http2 } as object) as unknown as FastifyInstance
  t.teardown(() => app.close())
  await app.register(fastifyDigestFields, { stallTimeout: 200 })
  app.addContentTypeParser('application/x-none', (_request, _payload, done) => { done(null) })
  app.post('/pipe', async (request) => {
    const destination = stuck()
    destinations.push(destination)
    request.raw.pipe(destination)
    return { piped: true }
  })
  return await listen(app)
}

for (const http2 of [false, true]) {
  t.test(`${http2 ? 'HTTP/2' : 'HTTP/1.1'}: a stalled pipe destination nobody listens to is destroyed with the error, and the process answers on`, async (t) => {
    const escaped = watchProcess(t)
    const destinations: Writable[] = []
    const port = await server(t, destinations, http2)
    for (const [digest, status] of [[member('sha-256', body), 200], [wrong, 400]] as const) {
      const headers = { 'content-type': 'application/x-none', 'content-digest': digest }
      const answer = http2
        ? await h2Request(port, { ':method': 'POST', ':path': '/pipe', ...headers }, [body.subarray(0, 150_000), body.subarray(150_000)])
        : await request(`http://127.0.0.1:${port}/pipe`, { method: 'POST', headers, body }).then(async (response) =>
          ({ status: response.statusCode, body: await response.body.text() }))
      t.equal(answer.status, status, `${status === 200 ? 'right' : 'wrong'} digest: answered ${status}`)
      if (status === 200) t.same(JSON.parse(answer.body), { piped: true }, 'the handler\'s reply, once the content verified')
      const destination = destinations.at(-1) as Writable
      t.ok(destination.destroyed, 'the destination is destroyed')
      t.equal((destination.errored as { code?: string } | null)?.code, 'FST_DIGEST_FIELDS_READER_STALLED', 'its errored property says why')
      t.equal(destination.listenerCount('error'), 0, 'no listener of the plugin\'s is left on it')
    }
    t.same(escaped, [], 'no uncaught exception')
  })
}
