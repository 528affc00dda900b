// Found by the sixth attack on issue 29, older than the double-send rule: a success reply that waits
// for the request's verdict (the handler answered before the content ended) was not the reply as
// sent. A file stream it carried stayed open when the verdict failed or the client left or stood
// still, after app.close() too; what the application did to the reply while it waited (an error
// handler's 302 and Location for an error thrown after the send, a header set after it) went out
// with the first payload. And after a stream that failed before its first byte, an error handler
// that hijacked the reply wrote the chunked framing and Trailer field set up for the stream's
// trailer section beside its own Content-Length. A held reply now goes as it was sent, a payload
// not sent is destroyed, and the fields placed for a failed stream go before any error handler runs.
import { createHash } from 'node:crypto'
import { createReadStream, writeFileSync, type ReadStream } from 'node:fs'
import { once } from 'node:events'
import { connect as h2connect } from 'node:http2'
import { connect } from 'node:net'
import { join } from 'node:path'
import { Readable } from 'node:stream'
import t from 'tap'
import Fastify, { type FastifyInstance, type FastifyReply } from 'fastify'
import fastifyDigestFields from '../../lib/index.js'
import { listen, rawRequest, type Tap } from '../helpers.js'

const content = Buffer.alloc(4096, 'c')
const digestOf = (data: Buffer): string => `sha-256=:${createHash('sha256').update(data).digest('base64')}:`
const wrong = `sha-256=:${Buffer.alloc(32).toString('base64')}:`
const fileText = 'the file a held reply sends'

interface Held {
  app: FastifyInstance
  port: number
  /** Resolved by the handler once it has sent (the reply then waits for the verdict). */
  reached: () => Promise<void>
  /** The file streams the handler sent. */
  files: ReadStream[]
}

/** A server whose handlers answer before the content ends, so that their reply waits for the verdict. */
async function serve (t: Tap, plugin: boolean, stallTimeout = 30_000, http2 = false): Promise<Held> {
  const app = Fastify({ http2 } as object) as unknown as FastifyInstance
  t.teardown(() => app.close())
  if (plugin) await app.register(fastifyDigestFields, { stallTimeout })
  app.addContentTypeParser('application/octet-stream', (_request, payload, done) => { done(null, payload) })
  const path = join(t.testdir(), 'sent.txt')
  writeFileSync(path, fileText)
  const files: ReadStream[] = []
  let arrived = (): void => {}
  let reachedOnce = new Promise<void>((resolve) => { arrived = resolve })
  const sent = (reply: FastifyReply, payload: unknown): FastifyReply => {
    reply.send(payload)
    arrived()
    return reply
  }
  app.post('/file', async (_request, reply) => {
    const file = createReadStream(path)
    files.push(file)
    return sent(reply, file)
  })
  const late = (status: number, headers: Record<string, string>, body?: string) => async (_request: unknown, reply: FastifyReply) => {
    reply.header('x-first', 'yes')
    sent(reply, { first: true })
    await Promise.resolve()
    throw Object.assign(new Error('thrown after the send'), { late: { status, headers, body } })
  }
  app.post('/then-302', late(302, { location: '/elsewhere' }))
  app.post('/then-204', late(204, {}))
  app.post('/then-gzip', late(200, { 'content-encoding': 'gzip' }, 'not gzip either'))
  app.post('/then-header', async (_request, reply) => {
    sent(reply, { first: true })
    reply.code(201).header('x-after', 'set after the send')
  })
  app.post('/then-cookie', async (_request, reply) => {
    sent(reply.header('set-cookie', ['a=1', 'b=2']), { first: true })
    reply.header('set-cookie', 'late=1')
  })
  app.setErrorHandler((error: Error & { late?: { status: number, headers: Record<string, string>, body?: string } }, _request, reply) => {
    if (error.late === undefined) throw error
    reply.code(error.late.status).headers(error.late.headers).send(error.late.body)
  })
  const port = await listen(app)
  return {
    app,
    port,
    files,
    reached: async () => {
      await reachedOnce
      reachedOnce = new Promise<void>((resolve) => { arrived = resolve })
    }
  }
}

/**
 * Posts `content` with `digest`, its second half only once the handler has sent its reply; `end`
 * says what the client does then: send the rest, leave, or stand still.
 */
async function post (held: Held, path: string, digest: string, end: 'send' | 'leave' | 'stall'): Promise<string> {
  const socket = connect({ host: '127.0.0.1', port: held.port })
  socket.on('error', () => {})
  const received: Buffer[] = []
  socket.on('data', (data: Buffer) => received.push(data))
  await once(socket, 'connect')
  socket.write([`POST ${path} HTTP/1.1`, 'Host: localhost', 'Content-Type: application/octet-stream',
    `Content-Length: ${content.length}`, `Content-Digest: ${digest}`, 'Connection: close', '', ''].join('\r\n'))
  socket.write(content.subarray(0, 2048))
  await held.reached()
  if (end === 'leave') socket.destroy()
  if (end === 'send') socket.write(content.subarray(2048))
  if (end === 'stall') t.teardown(() => socket.destroy())
  else await once(socket, 'close')
  return Buffer.concat(received).toString('latin1')
}

/** A response's status line and fields but its date, the fields in order of their names. */
function headOf (response: string): string {
  const [status, ...fields] = response.slice(0, response.indexOf('\r\n\r\n')).toLowerCase().split('\r\n')
  return [status, ...fields.filter((field) => !field.startsWith('date:')).sort()].join('\r\n')
}

/** The same over HTTP/2: the status and fields of the answer, but its date, and its content. */
async function post2 (held: Held, path: string): Promise<{ head: Record<string, unknown>, body: string }> {
  const session = h2connect(`http://127.0.0.1:${held.port}`)
  const headers = { ':method': 'POST', ':path': path, 'content-type': 'application/octet-stream' }
  const stream = session.request({ ...headers, 'content-length': String(content.length), 'content-digest': digestOf(content) })
  const received: Buffer[] = []
  stream.on('data', (data: Buffer) => received.push(data))
  const [head] = await Promise.all([
    once(stream, 'response') as Promise<[Record<string, unknown>]>,
    (async () => {
      stream.write(content.subarray(0, 2048))
      await held.reached()
      stream.end(content.subarray(2048))
    })()
  ])
  await once(stream, 'close')
  session.close()
  const { date, ...fields } = head[0]
  return { head: fields, body: Buffer.concat(received).toString() }
}

t.test('a held reply\'s file stream is closed when the verdict fails, the client leaves or stands still', async (t) => {
  for (const end of ['send', 'leave', 'stall'] as const) {
    const held = await serve(t, true, 200)
    const response = await post(held, '/file', end === 'send' ? wrong : digestOf(content), end)
    if (end === 'send') t.match(response, /^HTTP\/1\.1 400 /, 'the mismatch is answered with the problem')
    else t.equal(response, '', 'a request whose client left or stood still is answered by nobody')
    const [file] = held.files as [ReadStream]
    // Destroyed once the reply will not be sent; 'close' comes once its descriptor is closed.
    if (!file.closed) await once(file, 'close')
    t.equal(file.destroyed, true, `${end}: the file stream is destroyed`)
    t.equal(file.bytesRead, 0, `${end}: and nothing of it was read`)
  }
})

t.test('a held reply\'s file stream goes as it was sent once the verdict holds', async (t) => {
  const held = await serve(t, true)
  const response = await post(held, '/file', digestOf(content), 'send')
  t.match(response, /^HTTP\/1\.1 200 /)
  t.ok(response.includes(`\r\n${fileText}\r\n`), 'the file is sent')
})

t.test('a held reply goes with the status and fields it was sent with, as Fastify alone sends it', async (t) => {
  for (const path of ['/then-302', '/then-204', '/then-gzip', '/then-header', '/then-cookie']) {
    const alone = await serve(t, false)
    const expected = await post(alone, path, digestOf(content), 'send')
    const held = await serve(t, true)
    const response = await post(held, path, digestOf(content), 'send')
    t.match(expected, /^HTTP\/1\.1 200 OK\r\n/, `${path}: Fastify alone sends the first send as it was`)
    t.match(response, /^HTTP\/1\.1 200 OK\r\n/, `${path}: so does the plugin`)
    t.ok(response.endsWith('{"first":true}'), `${path}: with the first payload`)
    const head = headOf(response)
    t.notMatch(head, /location|content-encoding|x-after|late=1/, `${path}: and none set after the send`)
    t.equal(head, headOf(expected), `${path}: the same head as Fastify alone`)
  }
})

t.test('over HTTP/2 too, a held reply goes with the status and fields it was sent with', async (t) => {
  for (const path of ['/then-302', '/then-gzip', '/then-cookie']) {
    const expected = await post2(await serve(t, false, 30_000, true), path)
    const response = await post2(await serve(t, true, 30_000, true), path)
    t.equal(expected.head[':status'], 200, `${path}: Fastify alone sends the first send as it was`)
    t.same(response, expected, `${path}: so does the plugin, with the same fields and content`)
  }
})

t.test('after a stream failed before its first byte, an error handler\'s answer has one framing', async (t) => {
  const handlers: Record<string, (reply: FastifyReply) => void> = {
    hijacked (reply) {
      reply.hijack()
      reply.raw.writeHead(503, { 'content-length': '4', 'content-type': 'text/plain' })
      reply.raw.end('oops')
    },
    thrown () { throw new Error('the error handler failed too') },
    sent (reply) { reply.code(503).type('text/plain').send('oops') }
  }
  for (const [name, answer] of Object.entries(handlers)) {
    for (const plugin of [false, true]) {
      const app = Fastify()
      t.teardown(() => app.close())
      if (plugin) await app.register(fastifyDigestFields)
      app.get('/failing', async (_request, reply) => reply.send(new Readable({ read () { this.destroy(new Error('no first byte')) } })))
      app.setErrorHandler((_error, _request, reply) => { answer(reply) })
      const port = await listen(app)
      const response = await rawRequest(port, ['GET /failing HTTP/1.1', 'Host: localhost', 'Want-Content-Digest: sha-256=1', 'Want-Repr-Digest: sha-256=1'])
      const what = `${name}, ${plugin ? 'with the plugin' : 'Fastify alone'}`
      t.equal(response.status, name === 'thrown' ? 500 : 503, `${what}: the error handler's answer`)
      t.equal(response.headers['transfer-encoding'], undefined, `${what}: no chunked framing`)
      t.equal(response.headers.trailer, undefined, `${what}: no Trailer field`)
      t.equal(Number(response.headers['content-length']), Buffer.byteLength(response.body), `${what}: its Content-Length`)
      t.equal(response.headers['content-digest'], undefined, `${what}: no digest of the failed stream`)
    }
  }
})
