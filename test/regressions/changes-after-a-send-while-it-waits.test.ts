// Found by the attack on the response path (issue 29, seventh pass): a send waits in the plugin's
// response hooks while a file is hashed before it is sent (its first response). A handler that
// changed the reply after reply.send() meanwhile (a status, Content-Length, Content-Encoding) had
// those changes written with the file: a 404 or a 204 with the file's digest and body, or a
// Content-Length of 5 over 100 bytes, which swallowed the next request on the connection and reset
// the HTTP/2 stream. So did @fastify/static's fields for a later send that is dropped. The send now
// goes as it was sent, as a held one does. The second attack found a Transfer-Encoding set after the
// send, which the plugin took off: Node then framed the response with neither chunks nor a length.
import { createHash } from 'node:crypto'
import { once } from 'node:events'
import { createReadStream, writeFileSync } from 'node:fs'
import { connect as h2connect } from 'node:http2'
import { connect } from 'node:net'
import { join } from 'node:path'
import { setImmediate as turn } from 'node:timers/promises'
import t from 'tap'
import Fastify, { type FastifyInstance, type FastifyReply } from 'fastify'
import fastifyStatic from '@fastify/static'
import fastifyDigestFields, { staticFileDigests } from '../../lib/index.js'
import { listen, watchProcess, type Tap } from '../helpers.js'

const content = Buffer.alloc(100, 'A')
const sha256 = (data: Buffer): string => `sha-256=:${createHash('sha256').update(data).digest('base64')}:`

/** What each route does to the reply once it sent a file the plugin hashes first. */
const changes: Record<string, (reply: FastifyReply) => void> = {
  '/made-404': (reply) => { reply.code(404).header('content-length', '5').header('x-late', '1') },
  '/made-204': (reply) => { reply.code(204) },
  '/labelled-gzip': (reply) => { reply.header('content-encoding', 'gzip') },
  // Taken off again, it left Node's mark of a removed Transfer-Encoding: no framing at all.
  '/chunked-after-the-send': (reply) => { reply.header('transfer-encoding', 'chunked') }
}

/** Whether each change was made before anything of the send was written, as the test means it. */
const beforeTheHead: boolean[] = []

async function serve (t: Tap, http2: boolean): Promise<number> {
  const app = Fastify({ http2 } as object) as unknown as FastifyInstance
  await app.register(fastifyDigestFields, { responseDigests: ['content-digest'] })
  const folder = t.testdir({ 'b.txt': 'B'.repeat(300) })
  await app.register(fastifyStatic, { root: folder, setHeaders: staticFileDigests() })
  let files = 0
  for (const [path, change] of Object.entries(changes)) {
    app.get(path, async (_request, reply) => {
      // A file not seen before is hashed before it is sent.
      const file = join(folder, `a-${++files}.txt`)
      writeFileSync(file, content)
      reply.send(createReadStream(file))
      await turn()
      beforeTheHead.push(!reply.raw.headersSent)
      change(reply)
      return reply
    })
  }
  // @fastify/static sets the fields of its file before the send that is dropped.
  app.get('/then-a-static-file', async (_request, reply) => {
    const file = join(folder, `a-${++files}.txt`)
    writeFileSync(file, content)
    reply.send(createReadStream(file))
    await turn()
    beforeTheHead.push(!reply.raw.headersSent)
    return reply.sendFile('b.txt')
  })
  app.get('/next', async () => 'next')
  t.teardown(() => app.close())
  return await listen(app)
}

/** Reads the responses of one HTTP/1.1 connection by their framing: each status, fields and body. */
function framed (bytes: Buffer): Array<{ status: number, headers: Record<string, string>, body: Buffer }> {
  const responses = []
  let at = 0
  while (at < bytes.length) {
    const end = bytes.indexOf('\r\n\r\n', at)
    const [statusLine = '', ...lines] = bytes.subarray(at, end).toString('latin1').split('\r\n')
    const headers = Object.fromEntries(lines.map((line) => [line.slice(0, line.indexOf(':')).toLowerCase(), line.slice(line.indexOf(':') + 1).trim()]))
    const status = Number(statusLine.split(' ')[1])
    at = end + 4
    const chunks: Buffer[] = []
    if (headers['transfer-encoding'] === 'chunked') {
      for (;;) {
        const lineEnd = bytes.indexOf('\r\n', at)
        const size = parseInt(bytes.subarray(at, lineEnd).toString('latin1'), 16)
        at = lineEnd + 2
        if (size === 0) break
        chunks.push(bytes.subarray(at, at + size))
        at += size + 2
      }
      at = bytes.indexOf('\r\n', at) + 2
    } else if (status !== 204) {
      const length = Number(headers['content-length'] ?? 0)
      chunks.push(bytes.subarray(at, at + length))
      at += length
    }
    responses.push({ status, headers, body: Buffer.concat(chunks) })
  }
  return responses
}

t.test('changes to the reply after a send that waits for its file\'s digest: the send goes as it was sent, and the connection is kept', async (t) => {
  const escaped = watchProcess(t)
  const port = await serve(t, false)
  for (const path of [...Object.keys(changes), '/then-a-static-file']) {
    const socket = connect({ host: '127.0.0.1', port })
    const received: Buffer[] = []
    socket.on('data', (data: Buffer) => received.push(data))
    socket.write(`GET ${path} HTTP/1.1\r\nHost: x\r\n\r\nGET /next HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`)
    await once(socket, 'close')
    const [sent, next] = framed(Buffer.concat(received))
    t.equal(sent?.status, 200, `${path}: the status it was sent with`)
    t.ok(sent?.body.equals(content), `${path}: the file`)
    t.equal(sent?.headers['content-digest'], sha256(content), `${path}: its digest (node:crypto)`)
    t.notOk(sent !== undefined && ('x-late' in sent.headers || 'content-encoding' in sent.headers), `${path}: no field set after the send`)
    t.equal(next?.body.toString(), 'next', `${path}: the next request answered on the same connection`)
  }
  t.same(escaped, [], 'nothing escaped to the process')
  t.same(beforeTheHead, [true, true, true, true, true], 'every change came before the head was written')
})

t.test('the same over HTTP/2: the file, its digest, and its stream ended without a reset', async (t) => {
  const port = await serve(t, true)
  const session = h2connect(`http://127.0.0.1:${port}`)
  t.teardown(() => session.close())
  for (const path of [...Object.keys(changes), '/then-a-static-file']) {
    const stream = session.request({ ':path': path })
    const chunks: Buffer[] = []
    stream.on('data', (chunk: Buffer) => chunks.push(chunk))
    const [fields] = await once(stream, 'response') as [Record<string, string>]
    await once(stream, 'close')
    const body = Buffer.concat(chunks)
    t.equal(Number(fields[':status']), 200, path)
    t.ok(body.equals(content), `${path}: the file`)
    t.equal(fields['content-digest'], sha256(content), `${path}: its digest`)
    t.equal(stream.rstCode, 0, `${path}: no reset`)
  }
  t.notOk(beforeTheHead.includes(false), 'every change came before the head was written')
})
