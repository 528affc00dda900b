// Found by the attack on the reply's state (issue 29, fifth pass): a handler that sent and then
// threw (or sent an error, or whose error handler answered with a stream) while its first send
// waited in the plugin's response hooks had the error answered, as docs/responses.md says; then
// the first send, once its digests were found, was handed to Fastify too, which wrote into the
// finished response. Over HTTP/1.1 the connection was closed under the client, its next request
// never answered; over HTTP/2 the stream was reset with INTERNAL_ERROR after the answer, which a
// browser takes for a network error. A send that an answer to an error replaced is now dropped,
// its stream destroyed.
import { once } from 'node:events'
import { createReadStream, writeFileSync } from 'node:fs'
import { connect as h2connect } from 'node:http2'
import { connect } from 'node:net'
import { join } from 'node:path'
import { Readable } from 'node:stream'
import t from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import fastifyDigestFields from '../../lib/index.js'
import { listen, type Tap } from '../helpers.js'

const failed = (statusCode: number): Error => Object.assign(new Error(`failed with ${statusCode}`), { statusCode })

/** What each route answers once the send it made first is replaced. */
const answers: Record<string, number> = {
  '/send-then-throw': 500,
  '/send-then-throw-404': 404,
  '/send-then-send-an-error': 500,
  '/stream-then-throw': 500,
  '/error-handler-answers-with-a-stream': 503,
  // A file is hashed before it is sent, and a hook of the route's own sits between the plugin's.
  '/file-then-throw': 500
}

async function serve (t: Tap, http2: boolean, responseDigests: string[]): Promise<{ port: number, destroyed: string[], fileClosed: Promise<void> }> {
  const app = Fastify({ http2 } as object) as unknown as FastifyInstance
  await app.register(fastifyDigestFields, { responseDigests } as object)
  const destroyed: string[] = []
  // A stream that never ends by itself: only a destroy closes it.
  const watched = (name: string): Readable => {
    const stream = new Readable({ read () {} })
    stream.push(name)
    stream.once('close', () => destroyed.push(name))
    return stream
  }
  app.get('/send-then-throw', async (_request, reply) => { reply.send('first'); throw new Error('after the send') })
  app.get('/send-then-throw-404', async (_request, reply) => { reply.send('first'); throw failed(404) })
  app.get('/send-then-send-an-error', async (_request, reply) => { reply.send('first'); reply.send(failed(500)); return reply })
  app.get('/stream-then-throw', async (_request, reply) => { reply.send(watched('first stream')); throw new Error('after the send') })
  app.get('/error-handler-answers-with-a-stream', {
    errorHandler: (_error, _request, reply) => { reply.code(503).send(Readable.from(['handled'])) }
  }, async (_request, reply) => { reply.send('first'); throw new Error('after the send') })
  const path = join(t.testdir(), 'never-sent.txt')
  writeFileSync(path, 'a file whose send was replaced')
  let closed = (): void => {}
  const fileClosed = new Promise<void>((resolve) => { closed = resolve })
  app.get('/file-then-throw', { onSend: async (_request, _reply, payload) => payload }, async (_request, reply) => {
    reply.send(createReadStream(path).once('close', closed))
    throw new Error('after the send')
  })
  app.get('/next', async () => 'next')
  t.teardown(() => app.close())
  return { port: await listen(app), destroyed, fileClosed }
}

/** Two requests on one HTTP/1.1 connection, the second closing it: every status line the server wrote, and the last body. */
async function twoOnOneConnection (port: number, path: string, headers: string[]): Promise<{ statuses: string[], last: string }> {
  const socket = connect({ host: '127.0.0.1', port })
  await once(socket, 'connect')
  const received: Buffer[] = []
  socket.on('data', (data) => received.push(data))
  socket.write([`GET ${path} HTTP/1.1`, 'Host: localhost', ...headers, '', ''].join('\r\n'))
  socket.write(['GET /next HTTP/1.1', 'Host: localhost', 'Connection: close', '', ''].join('\r\n'))
  await once(socket, 'close')
  const text = Buffer.concat(received).toString('latin1')
  return { statuses: text.match(/HTTP\/1\.1 \d+/g) ?? [], last: text.slice(text.lastIndexOf('\r\n\r\n') + 4) }
}

/** One HTTP/2 request: its status, whether its stream ended, and the code it closed with. */
async function overHttp2 (port: number, path: string, headers: Record<string, string>): Promise<{ status: number, ended: boolean, rstCode: number }> {
  const session = h2connect(`http://127.0.0.1:${port}`)
  session.on('error', () => {})
  try {
    const stream = session.request({ ':path': path, ...headers })
    stream.on('error', () => {})
    let status = 0
    let ended = false
    stream.once('response', (fields) => { status = Number(fields[':status']) })
    stream.on('end', () => { ended = true })
    stream.resume()
    await new Promise((resolve) => stream.once('close', resolve))
    return { status, ended, rstCode: stream.rstCode ?? -1 }
  } finally {
    session.close()
  }
}

const clients: Array<[string, string[], string[]]> = [
  ['Want-Content-Digest asked', [], ['Want-Content-Digest: sha-256=1']],
  ['Unencoded-Digest sent unasked', ['unencoded-digest'], []],
  ['Content-Digest and Repr-Digest sent unasked', ['content-digest', 'repr-digest'], []]
]

for (const [name, responseDigests, headers] of clients) {
  t.test(`${name}: the answer to the error goes, and the connection is kept for the next request`, async (t) => {
    const { port, destroyed, fileClosed } = await serve(t, false, responseDigests)
    for (const [path, status] of Object.entries(answers)) {
      const { statuses, last } = await twoOnOneConnection(port, path, headers)
      t.same(statuses, [`HTTP/1.1 ${status}`, 'HTTP/1.1 200'], `${path}: the error answered, then the next request`)
      t.equal(last, 'next')
    }
    t.same(destroyed, ['first stream'], 'the stream of the send replaced is destroyed')
    await fileClosed
  })

  t.test(`${name}, over HTTP/2: the answer to the error ends its stream without a reset`, async (t) => {
    const { port, destroyed, fileClosed } = await serve(t, true, responseDigests)
    const want = Object.fromEntries(headers.map((line) => line.toLowerCase().split(': ') as [string, string]))
    for (const [path, status] of Object.entries(answers)) {
      t.same(await overHttp2(port, path, want), { status, ended: true, rstCode: 0 }, path)
    }
    t.same(destroyed, ['first stream'])
    await fileClosed
  })
}
