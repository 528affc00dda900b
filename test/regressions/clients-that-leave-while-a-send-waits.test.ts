// Found by the second attack on the response path (issue 29, seventh pass): an HTTP/2 client that
// cancels its stream while the send waits in the plugin's response hooks (a file hashed before its
// first response, or any file whose digest is looked up) left the file open. After the wait the send
// went on to Fastify, which pipes a stream into a response already closed and, over HTTP/2, never
// destroys it: thirty cancels, thirty descriptors. A send whose client left during the wait is now
// dropped there, its stream destroyed. Over HTTP/1.1 Fastify destroyed it; this pins both.
import { once } from 'node:events'
import { createReadStream, writeFileSync, type ReadStream } from 'node:fs'
import { connect as h2connect, constants } from 'node:http2'
import { connect } from 'node:net'
import { join } from 'node:path'
import t from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import fastifyDigestFields from '../../lib/index.js'
import { listen, watchProcess, type Tap } from '../helpers.js'

/** A server whose route sends a file it has not sent before, once the client has left; every file it opened, closed or not. */
async function serve (t: Tap, http2: boolean, responseDigests: string[]): Promise<{ port: number, opened: ReadStream[], left: Promise<unknown> }> {
  const app = Fastify({ http2 } as object) as unknown as FastifyInstance
  await app.register(fastifyDigestFields, { responseDigests } as object)
  const folder = t.testdir({})
  const opened: ReadStream[] = []
  let left: (value: unknown) => void = () => {}
  const clientLeft = new Promise((resolve) => { left = resolve })
  app.get('/file', async (_request, reply) => {
    await once(reply.raw, 'close')
    left(null)
    const path = join(folder, `${opened.length}.txt`)
    writeFileSync(path, 'a file never sent')
    const file = createReadStream(path)
    opened.push(file)
    return reply.send(file)
  })
  t.teardown(() => app.close())
  return { port: await listen(app), opened, left: clientLeft }
}

const cases: Array<[string, string[], Record<string, string>]> = [
  ['Want-Repr-Digest asked', [], { 'want-repr-digest': 'sha-256=1' }],
  ['Unencoded-Digest sent unasked', ['unencoded-digest'], {}]
]

for (const [name, responseDigests, headers] of cases) {
  t.test(`${name}, over HTTP/2: a file sent after the client cancelled its stream is closed`, async (t) => {
    const escaped = watchProcess(t)
    const { port, opened, left } = await serve(t, true, responseDigests)
    const session = h2connect(`http://127.0.0.1:${port}`)
    session.on('error', () => {})
    t.teardown(() => session.close())
    const stream = session.request({ ':path': '/file', ...headers })
    stream.on('error', () => {})
    stream.once('ready', () => { stream.close(constants.NGHTTP2_CANCEL) })
    await left
    await Promise.all(opened.map(async (file) => { if (!file.closed) await once(file, 'close') }))
    t.equal(opened.length, 1, 'the file was opened, and is closed')
    t.same(escaped, [], 'nothing escaped to the process')
  })

  t.test(`${name}, over HTTP/1.1: the same`, async (t) => {
    const { port, opened, left } = await serve(t, false, responseDigests)
    const socket = connect({ host: '127.0.0.1', port })
    socket.on('error', () => {})
    socket.write(`GET /file HTTP/1.1\r\nHost: x\r\n${Object.entries(headers).map(([field, value]) => `${field}: ${value}\r\n`).join('')}\r\n`, () => socket.destroy())
    await left
    await Promise.all(opened.map(async (file) => { if (!file.closed) await once(file, 'close') }))
    t.equal(opened.length, 1, 'the file was opened, and is closed')
  })
}
