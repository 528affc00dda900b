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
import fs, { createReadStream, writeFileSync, type ReadStream } from 'node:fs'
import { once } from 'node:events'
import { connect as h2connect } from 'node:http2'
import { connect } from 'node:net'
import { join } from 'node:path'
import { Readable } from 'node:stream'
import { gzipSync } from 'node:zlib'
import t from 'tap'
import Fastify, { type FastifyInstance, type FastifyReply } from 'fastify'
import fastifyStatic from '@fastify/static'
import fastifyDigestFields from '../../lib/index.js'
import { listen, rawRequest, watchProcess, type Tap } from '../helpers.js'

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
  /** What the server logged at warn and above. */
  logs: string[]
  /** How many streams of the old kind (no Readable) were destroyed. */
  destroyed: { oldKind: number }
}

/** A server whose handlers answer before the content ends, so that their reply waits for the verdict. */
async function serve (t: Tap, plugin: boolean, stallTimeout = 30_000, http2 = false): Promise<Held> {
  const logs: string[] = []
  const app = Fastify({ http2, logger: { level: 'warn', stream: { write (line: string) { logs.push(line) } } } } as object) as unknown as FastifyInstance
  t.teardown(() => app.close())
  if (plugin) await app.register(fastifyDigestFields, { stallTimeout })
  app.addContentTypeParser('application/octet-stream', (_request, payload, done) => { done(null, payload) })
  const path = join(t.testdir(), 'sent.txt')
  writeFileSync(path, fileText)
  const files: ReadStream[] = []
  const destroyed = { oldKind: 0 }
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
  app.post('/then-404', async (_request, reply) => {
    sent(reply, { first: true })
    reply.code(404).header('x-second', 'yes').send('second')
  })
  app.post('/then-500', async (_request, reply) => {
    sent(reply, { first: true })
    await Promise.resolve()
    throw new Error('thrown after the send, to the default error handler')
  })
  app.post('/then-message', async (_request, reply) => {
    sent(reply, { first: true })
    reply.raw.statusMessage = 'Set after the send'
  })
  app.post('/missing-file', async (_request, reply) => sent(reply, createReadStream(join(path, 'missing'))))
  app.post('/then-hijack', async (_request, reply) => {
    sent(reply, { first: true })
    reply.hijack()
    reply.raw.writeHead(202, { 'content-length': '8' }).end('hijacked')
  })
  app.post('/same-twice', async (_request, reply) => {
    const file = createReadStream(path)
    reply.send(file)
    return sent(reply, file)
  })
  // Sends a file only once the plugin answered the content's problem in its place.
  app.post('/after-the-answer', (request, reply) => {
    const send = (): void => {
      const file = createReadStream(path)
      files.push(file)
      const kind = request.headers['x-send']
      // A stream of the old kind, without destroy(), no payload at all, a file that is missing
      // (its error comes once it is destroyed) and a stream whose destroy fails.
      const payloads: Record<string, () => unknown> = {
        'pipe-only': () => ({ pipe () {}, on () {} }),
        'old-kind': () => ({ pipe () {}, on () {}, destroy () { destroyed.oldKind++ } }),
        nothing: () => null,
        missing: () => createReadStream(join(path, 'missing')),
        'failing-destroy': failingDestroy
      }
      reply.send(kind === undefined ? file : payloads[kind as string]?.())
      if (kind !== undefined) file.destroy()
    }
    if (reply.raw.writableFinished) send()
    else reply.raw.once('finish', send)
  })
  app.post('/described', async (_request, reply) => sent(reply.headers({
    'content-encoding': 'gzip',
    etag: '"v1"',
    'last-modified': 'Tue, 24 Nov 2026 10:00:00 GMT',
    location: '/elsewhere',
    'content-disposition': 'attachment; filename="a.gz"',
    'set-cookie': 'kept=1',
    'access-control-allow-origin': '*'
  }), gzipSync('a representation')))
  app.post('/then-failing-destroy', async (_request, reply) => {
    sent(reply, { first: true })
    reply.send(failingDestroy())
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
    logs,
    destroyed,
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

/** A stream whose destroy fails. */
const failingDestroy = (): Readable => new Readable({
  read () {},
  destroy (_error, callback) { callback(new Error('the destroy failed')) }
})

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
  const escaped = watchProcess(t)
  for (const path of ['/then-302', '/then-204', '/then-gzip', '/then-header', '/then-cookie', '/then-404', '/then-500', '/then-message',
    '/then-failing-destroy']) {
    const alone = await serve(t, false)
    const expected = await post(alone, path, digestOf(content), 'send')
    const held = await serve(t, true)
    const response = await post(held, path, digestOf(content), 'send')
    t.match(expected, /^HTTP\/1\.1 200 OK\r\n/, `${path}: Fastify alone sends the first send as it was`)
    t.match(response, /^HTTP\/1\.1 200 OK\r\n/, `${path}: so does the plugin`)
    t.ok(response.endsWith('{"first":true}'), `${path}: with the first payload`)
    const head = headOf(response)
    t.notMatch(head, /location|content-encoding|x-after|late=1|x-second|after the send/, `${path}: and none set after the send`)
    t.equal(head, headOf(expected), `${path}: the same head as Fastify alone`)
  }
  t.same(escaped, [], 'nothing reached the process')
})

t.test('a stream sent after the plugin answered the problem in the handler\'s place is destroyed', { timeout: 10_000 }, async (t) => {
  const held = await serve(t, true)
  const response = await rawRequest(held.port, ['POST /after-the-answer HTTP/1.1', 'Host: localhost', 'Content-Type: application/octet-stream',
    `Content-Length: ${content.length}`, `Content-Digest: ${wrong}`], [content])
  t.equal(response.status, 400, 'the plugin answers the problem, as nobody reads the content')
  const [file] = held.files as [ReadStream]
  t.equal(file.destroyed, true, 'the file the handler sent after it is destroyed')
  if (!file.closed) await once(file, 'close')
  t.match(held.logs.join(''), /sent a stream after its content's problem was answered/, 'and that is logged')
  for (const kind of ['pipe-only', 'old-kind', 'nothing', 'missing', 'failing-destroy']) {
    const escaped = watchProcess(t)
    const logged = held.logs.length
    const response = await rawRequest(held.port, ['POST /after-the-answer HTTP/1.1', 'Host: localhost', 'Content-Type: application/octet-stream',
      `Content-Length: ${content.length}`, `Content-Digest: ${wrong}`, `X-Send: ${kind}`], [content])
    t.equal(response.status, 400, `${kind}: the problem`)
    const lines = held.logs.slice(logged).join('')
    t.match(lines, kind === 'nothing' ? /Reply was already sent/ : /sent a stream after/, `${kind}: the later send logged, by Fastify when it is not a stream`)
    t.same(escaped, [], `${kind}: nothing reached the process`)
    if (kind === 'old-kind') t.equal(held.destroyed.oldKind, 1, 'a stream of the old kind with destroy() is destroyed')
  }
})

t.test('@fastify/static\'s files for requests whose digest failed are closed', { timeout: 10_000 }, async (t) => {
  const opened: ReadStream[] = []
  const original = fs.createReadStream
  let allOpened = (): void => {}
  const count = 8
  const whenAllOpened = new Promise<void>((resolve) => { allOpened = resolve })
  fs.createReadStream = ((...args: Parameters<typeof original>) => {
    const stream = original(...args)
    if (opened.push(stream) === count) allOpened()
    return stream
  }) as typeof original
  t.teardown(() => { fs.createReadStream = original })
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(fastifyDigestFields)
  const root = t.testdir({ 'served.txt': fileText })
  await app.register(fastifyStatic, { root })
  const port = await listen(app)
  const responses = await Promise.all(Array.from({ length: count }, async () => await rawRequest(port,
    ['GET /served.txt HTTP/1.1', 'Host: localhost', 'Content-Length: 10', `Content-Digest: ${wrong}`], [Buffer.alloc(10, 'b')])))
  t.same(responses.map((response) => response.status), Array(count).fill(400), 'each is answered with the problem')
  await whenAllOpened
  await Promise.all(opened.map(async (stream) => { if (!stream.closed) await once(stream, 'close') }))
  t.ok(opened.every((stream) => stream.destroyed), 'every file @fastify/static opened is closed')
})

t.test('the problem in place of a held reply goes without the fields that described the reply\'s content', async (t) => {
  const held = await serve(t, true)
  const response = await post(held, '/described', wrong, 'send')
  const head = headOf(response)
  t.match(head, /^http\/1\.1 400 /, 'the problem')
  t.notMatch(head, /\r\n(content-encoding|etag|last-modified|content-disposition):/, 'none of its content\'s fields')
  t.match(head, /\r\nset-cookie: kept=1(\r\n|$)/, 'a cookie stays, as on Fastify\'s error answers')
  t.match(head, /\r\naccess-control-allow-origin: \*(\r\n|$)/, 'and so does CORS, for a browser to read the problem')
  t.match(JSON.parse(response.slice(response.indexOf('\r\n\r\n') + 4)), { title: 'Mismatching Digest Value' }, 'a problem document that parses')
})

t.test('a stream sent twice while the reply waits is sent once', async (t) => {
  const held = await serve(t, true)
  const response = await post(held, '/same-twice', digestOf(content), 'send')
  t.match(response, /^HTTP\/1\.1 200 /, 'the held send goes')
  t.ok(response.includes(`\r\n${fileText}\r\n`), 'with the file, which the dropped send did not destroy')
  t.equal(held.logs.filter((line) => line.includes('sent its reply twice')).length, 1, 'the later sends logged once')
})

t.test('a held reply whose digest fails is the problem, whatever was sent or thrown after it', async (t) => {
  const held = await serve(t, true)
  for (const path of ['/then-302', '/then-gzip', '/then-404', '/then-500', '/then-message']) {
    const response = await post(held, path, wrong, 'send')
    t.match(response, /^HTTP\/1\.1 400 Bad Request\r\n/, `${path}: the problem`)
    t.match(headOf(response), /\r\ncontent-type: application\/problem\+json(\r\n|$)/, `${path}: as a problem document`)
    t.notMatch(headOf(response), /location|content-encoding|x-second/, `${path}: with nothing set after the send`)
  }
})

t.test('a held stream that fails while it waits is answered as Fastify alone answers it, the process goes on', async (t) => {
  const escaped = watchProcess(t)
  const expected = await post(await serve(t, false), '/missing-file', digestOf(content), 'send')
  const held = await serve(t, true)
  const response = await post(held, '/missing-file', digestOf(content), 'send')
  t.match(expected, /^HTTP\/1\.1 500 /, 'Fastify alone answers the missing file with a 500')
  t.equal(response.slice(response.indexOf('\r\n\r\n')), expected.slice(expected.indexOf('\r\n\r\n')), 'so does the plugin, once the content is verified')
  t.match(await post(held, '/missing-file', wrong, 'send'), /^HTTP\/1\.1 400 /, 'and the problem when its digest fails')
  t.same(escaped, [], 'nothing reached the process')
})

t.test('a handler that hijacks its reply after the send writes its own, as without the plugin', async (t) => {
  const escaped = watchProcess(t)
  for (const plugin of [false, true]) {
    const response = await post(await serve(t, plugin), '/then-hijack', digestOf(content), 'send')
    t.match(response, /^HTTP\/1\.1 (200|202) /, plugin ? 'with the plugin, its own answer (the send was held)' : 'Fastify alone, the first send')
    if (plugin) t.ok(response.endsWith('\r\n\r\nhijacked'), 'the hijacked answer')
  }
  t.same(escaped, [], 'nothing reached the process')
})

t.test('over HTTP/2 too, a held reply goes with the status and fields it was sent with', async (t) => {
  // Node warns once a process when an HTTP/2 response's status message is read or set.
  const warnings: string[] = []
  const warned = (warning: Error): void => { warnings.push(warning.message) }
  process.on('warning', warned)
  t.teardown(() => { process.off('warning', warned) })
  for (const path of ['/then-302', '/then-gzip', '/then-cookie']) {
    const expected = await post2(await serve(t, false, 30_000, true), path)
    const response = await post2(await serve(t, true, 30_000, true), path)
    t.equal(expected.head[':status'], 200, `${path}: Fastify alone sends the first send as it was`)
    t.same(response, expected, `${path}: so does the plugin, with the same fields and content`)
  }
  t.same(warnings, [], 'without a warning of Node\'s')
})

/** Two requests pipelined on one connection, the first asking for digests: what came back, as text. */
async function pipelined (port: number): Promise<string> {
  const socket = connect({ host: '127.0.0.1', port })
  socket.on('error', () => {})
  const received: Buffer[] = []
  socket.on('data', (data: Buffer) => received.push(data))
  await once(socket, 'connect')
  socket.write('GET /failing HTTP/1.1\r\nHost: localhost\r\nWant-Content-Digest: sha-256=1\r\nWant-Repr-Digest: sha-256=1\r\n\r\n' +
    'GET /next HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n')
  await once(socket, 'close')
  return Buffer.concat(received).toString('latin1')
}

t.test('after a stream failed before its first byte, an error handler\'s answer has one framing', async (t) => {
  const handlers: Record<string, (reply: FastifyReply) => void> = {
    'hijacked with its own Content-Length' (reply) {
      reply.hijack()
      reply.raw.writeHead(503, { 'content-length': '4', 'content-type': 'text/plain' })
      reply.raw.end('oops')
    },
    'hijacked and framed by Node' (reply) {
      reply.hijack()
      reply.raw.writeHead(503, { 'content-type': 'text/plain' })
      reply.raw.write('oo')
      reply.raw.end('ps')
    },
    'hijacked and ended by Node' (reply) {
      reply.hijack()
      reply.raw.statusCode = 503
      reply.raw.end('oops')
    },
    thrown () { throw new Error('the error handler failed too') },
    sent (reply) { reply.code(503).type('text/plain').send('oops') },
    'sent as a stream' (reply) { reply.code(503).type('text/plain').send(Readable.from(['oo', 'ps'])) }
  }
  for (const [name, answer] of Object.entries(handlers)) {
    for (const plugin of [false, true]) {
      const app = Fastify()
      t.teardown(() => app.close())
      if (plugin) await app.register(fastifyDigestFields)
      app.get('/failing', async (_request, reply) => reply.send(new Readable({ read () { this.destroy(new Error('no first byte')) } })))
      app.get('/next', async () => 'next')
      app.setErrorHandler((_error, _request, reply) => { answer(reply) })
      const port = await listen(app)
      const what = `${name}, ${plugin ? 'with the plugin' : 'Fastify alone'}`
      const text = await pipelined(port)
      const head = headOf(text)
      t.match(head, name === 'thrown' ? /^http\/1\.1 500 / : /^http\/1\.1 503 /, `${what}: the error handler's answer`)
      const chunked = /\r\ntransfer-encoding: chunked(\r\n|$)/.test(head)
      const length = /\r\ncontent-length: \d+(\r\n|$)/.test(head)
      t.ok(chunked !== length, `${what}: one framing, chunked or Content-Length`)
      t.notMatch(head, /\r\n(trailer|content-digest|repr-digest):/, `${what}: no Trailer field, no digest of the failed stream`)
      t.match(text, /\r\n\r\nnext$/, `${what}: the request pipelined behind it is answered`)
    }
  }
})
