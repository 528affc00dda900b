// Reported by the third attack on the response path (issue 29, seventh pass): app.close() waited for
// ever after HTTP/2 clients cancelled a file sent with its digests in the trailer section, then
// closed their sessions. It was not the plugin's: the probe's clients never read their cancelled
// streams, so their sessions, closed gracefully, never ended their connections, and the server waits
// for the peer to end, as it does with Fastify alone. This pins that with clients that read what
// they get, the server's sessions all close and app.close() ends, wherever the cancel falls.
import { once } from 'node:events'
import { createReadStream, writeFileSync } from 'node:fs'
import { connect, constants, type ClientHttp2Stream } from 'node:http2'
import { join } from 'node:path'
import t from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import fastifyDigestFields from '../../lib/index.js'
import { listen, watchProcess } from '../helpers.js'

const requests: Array<[string, Record<string, string>]> = [
  ['a 4 MiB file whose Content-Digest goes in the trailer section', { 'want-content-digest': 'sha-256=5' }],
  ['a problem answered before the content (Want-Content-Digest not an integer)', { 'want-content-digest': 'sha-256' }]
]
const cancelPoints: Array<[string, (stream: ClientHttp2Stream, cancel: () => void) => void]> = [
  ['once the request is sent', (stream, cancel) => stream.once('ready', cancel)],
  ['once the head arrives', (stream, cancel) => stream.once('response', cancel)],
  ['once content arrives', (stream, cancel) => stream.once('data', cancel)]
]

for (const [name, headers] of requests) {
  t.test(`${name}: every server session closes, and app.close() ends`, async (t) => {
    const escaped = watchProcess(t)
    const app = Fastify({ http2: true } as object) as unknown as FastifyInstance
    await app.register(fastifyDigestFields)
    const path = join(t.testdir({}), 'big.bin')
    writeFileSync(path, Buffer.alloc(4 << 20, 7))
    app.get('/file', async (_request, reply) => reply.send(createReadStream(path)))
    const closed: Array<Promise<unknown>> = []
    app.server.on('session', (session) => closed.push(once(session, 'close')))
    const port = await listen(app)
    for (const [, cancelAt] of cancelPoints) {
      const session = connect(`http://127.0.0.1:${port}`)
      session.on('error', () => {})
      const stream = session.request({ ':path': '/file', ...headers })
      stream.on('error', () => {})
      stream.resume()
      cancelAt(stream, () => {
        stream.close(constants.NGHTTP2_CANCEL)
        session.close()
      })
      await once(session, 'close')
    }
    await app.close()
    await Promise.all(closed)
    t.equal(closed.length, cancelPoints.length, 'the server had a session for each client, and each closed')
    t.same(escaped, [], 'nothing escaped to the process')
  })
}
