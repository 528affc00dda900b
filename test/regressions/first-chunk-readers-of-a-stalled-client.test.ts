// Found by the README-only attack of issue 29's tenth pass: a handler that replies once it has the
// first chunk of request.raw, and a client that sends part of its content and stops. The plugin held
// everything that had arrived (it held the last kilobyte received), so the handler got nothing and
// sent nothing, and no wait of the plugin's bounded the request: it stayed open whatever stallTimeout
// said. Content whose length the connection enforces now reaches its readers but for its last
// kilobyte, which must arrive or the request is cut short; the reply then waits for the verdict, and
// the client that stopped is given up after stallTimeout.
import { once } from 'node:events'
import { connect as h2connect } from 'node:http2'
import t from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import fastifyDigestFields from '../../lib/index.js'
import { fuzzSeed, listen, member, rawConnection, seededBytes, watchProcess, type Tap } from '../helpers.js'

t.comment(`seed ${fuzzSeed}`)
const body = seededBytes(5000, fuzzSeed)
const right = member('sha-256', body)
const wrong = `sha-256=:${Buffer.alloc(32).toString('base64')}:`

/** A server whose handler answers with the length of the first chunk it reads; `firsts` gets each. */
async function server (t: Tap, http2: boolean, firsts: (length: number) => void): Promise<number> {
  const app = Fastify({ http2 } as object) as unknown as FastifyInstance
  t.teardown(() => app.close())
  await app.register(fastifyDigestFields, { stallTimeout: 200 })
  app.addContentTypeParser('application/x-none', (_request, _payload, done) => { done(null) })
  app.post('/first', async (request, reply) => {
    request.raw.once('data', (chunk: Buffer) => {
      firsts(chunk.length)
      reply.send({ first: chunk.length })
    })
    return await reply
  })
  return await listen(app)
}

interface Sent {
  /** Writes more of the content; `end` ends it. */
  write: (bytes: Buffer, end: boolean) => void
  /** The answer's status, or 'closed' when the request was given up without one. */
  answered: Promise<string>
}

/** Sends the head of a request for the whole body, and `part` of its content. */
async function send (t: Tap, port: number, http2: boolean, digest: string, part: Buffer): Promise<Sent> {
  const fields = { 'content-type': 'application/x-none', 'content-length': String(body.length), 'content-digest': digest }
  if (!http2) {
    const { socket, answered } = await rawConnection(port)
    const head = ['POST /first HTTP/1.1', 'Host: localhost', ...Object.entries(fields).map(([name, value]) => `${name}: ${value}`)]
    socket.write([...head, '', ''].join('\r\n'))
    socket.write(part)
    t.teardown(() => socket.destroy())
    return { write: (bytes) => socket.write(bytes), answered }
  }
  const session = h2connect(`http://127.0.0.1:${port}`)
  session.on('error', () => {})
  t.teardown(() => session.destroy())
  const stream = session.request({ ':method': 'POST', ':path': '/first', ...fields }, { endStream: false })
  stream.on('error', () => {})
  stream.write(part)
  const answered = Promise.race([
    once(stream, 'response').then(([headers]) => String((headers as Record<string, number>)[':status'])),
    once(stream, 'close').then(() => 'closed')
  ])
  return { write: (bytes, end) => end ? stream.end(bytes) : stream.write(bytes), answered }
}

for (const http2 of [false, true]) {
  const protocol = http2 ? 'HTTP/2' : 'HTTP/1.1'

  t.test(`${protocol}: a handler that answers on its first chunk gets it, and a client that stops is given up`, async (t) => {
    const escaped = watchProcess(t)
    const firsts: number[] = []
    const port = await server(t, http2, (length) => firsts.push(length))
    // 2000 bytes are all before the content's last kilobyte; of 4500, the chunk is split where it starts.
    for (const [sent, first] of [[2000, 2000], [4500, body.length - 1024]] as const) {
      const { answered } = await send(t, port, http2, right, body.subarray(0, sent))
      t.equal(await answered, 'closed', `${sent} of ${body.length} bytes, then nothing: given up without an answer`)
      t.equal(firsts.at(-1), first, `the handler had the ${first} bytes before the content's last kilobyte`)
    }
    t.same(escaped, [], 'no uncaught exception')
  })

  t.test(`${protocol}: the client that sends the rest late is answered on the verdict`, async (t) => {
    for (const [digest, status] of [[right, '200'], [wrong, '400']] as const) {
      let firstRead: (length: number) => void = () => {}
      const read = new Promise<number>((resolve) => { firstRead = resolve })
      const port = await server(t, http2, (length) => firstRead(length))
      const { write, answered } = await send(t, port, http2, digest, body.subarray(0, 2000))
      t.equal(await read, 2000, 'the handler read the first 2000 bytes while the rest had not been sent')
      write(body.subarray(2000), true)
      t.equal(await answered, status, `${status === '200' ? 'right' : 'wrong'} digest: ${status}, once the content is complete`)
    }
  })
}
