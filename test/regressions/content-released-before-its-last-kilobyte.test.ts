// Readers now get every byte before the last kilobyte of a Content-Length as it arrives
// (first-chunk-readers-of-a-stalled-client.test.ts). Two things had leaned on the last kilobyte
// received being held, and the README-only attack of that change found the first:
// - a multipart body's close delimiter split over two chunks: the bytes that began it went to the
//   reader before the rest arrived, and @fastify/multipart ended the last file there, before the
//   verdict on a wrong digest;
// - the first chunk's hash, put off until the next chunk arrives: a reader that changed its chunk in
//   place before then changed what was hashed.
import { once } from 'node:events'
import t from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import fastifyMultipart from '@fastify/multipart'
import fastifyDigestFields from '../../lib/index.js'
import { fuzzSeed, listen, member, rawConnection, seededBytes, watchProcess } from '../helpers.js'

t.comment(`seed ${fuzzSeed}`)
const wrong = `sha-256=:${Buffer.alloc(32).toString('base64')}:`

/** Writes a request's head and its content in two writes, the second once the server read the first. */
async function sendInTwo (port: number, fields: Record<string, string>, content: Buffer, cut: number, read: Promise<unknown>): Promise<string> {
  const { socket, answered } = await rawConnection(port)
  const head = ['POST / HTTP/1.1', 'Host: localhost', 'Connection: close', `Content-Length: ${content.length}`,
    ...Object.entries(fields).map(([name, value]) => `${name}: ${value}`)]
  socket.write([...head, '', ''].join('\r\n'))
  socket.write(content.subarray(0, cut))
  await read
  socket.write(content.subarray(cut))
  return await answered
}

t.test('a close delimiter split over two chunks does not end the last part before the verdict', async (t) => {
  const escaped = watchProcess(t)
  const app = Fastify() as unknown as FastifyInstance
  t.teardown(() => app.close())
  await app.register(fastifyDigestFields)
  await app.register(fastifyMultipart)
  const ended: string[] = []
  let firstRead: () => void = () => {}
  app.post('/', async (request) => {
    const file = await request.file()
    let length = 0
    for await (const chunk of file?.file ?? []) {
      length += (chunk as Buffer).length
      firstRead()
    }
    ended.push(request.digest === null ? 'before the verdict' : 'verified')
    return { length }
  })
  const port = await listen(app)
  const opening = Buffer.from('--BB\r\nContent-Disposition: form-data; name="f"; filename="a.bin"\r\n\r\n')
  const file = seededBytes(3000, fuzzSeed)
  // An epilogue long enough that the delimiter lies before the content's last kilobyte.
  const content = Buffer.concat([opening, file, Buffer.from('\r\n--BB--'), Buffer.alloc(1500, 0x45)])
  for (const into of [3, 6, 7]) {
    for (const [digest, status] of [[wrong, '400'], [member('sha-256', content), '200']] as const) {
      const read = new Promise<void>((resolve) => { firstRead = resolve })
      const answer = await sendInTwo(port, { 'content-type': 'multipart/form-data; boundary=BB', 'content-digest': digest },
        content, opening.length + file.length + into, read)
      t.equal(answer, status, `split ${into} bytes into the delimiter, ${status === '200' ? 'right' : 'wrong'} digest: ${status}`)
    }
  }
  t.same(ended, ['verified', 'verified', 'verified'], 'the last part ended only for content that verified')
  t.same(escaped, [], 'no uncaught exception')
})

t.test('a reader that zeroes its chunks does not change what was hashed, in one chunk or two', async (t) => {
  const app = Fastify() as unknown as FastifyInstance
  t.teardown(() => app.close())
  await app.register(fastifyDigestFields)
  app.addContentTypeParser('application/x-none', (_request, _payload, done) => { done(null) })
  let firstRead: () => void = () => {}
  app.post('/', async (request) => {
    let length = 0
    request.raw.on('data', (chunk: Buffer) => {
      length += chunk.length
      chunk.fill(0)
      firstRead()
    })
    await once(request.raw, 'end')
    return { length }
  })
  const port = await listen(app)
  const content = seededBytes(5000, fuzzSeed)
  const zeroes = Buffer.alloc(content.length)
  for (const cut of [content.length, 2000]) {
    for (const [digest, status] of [[member('sha-256', zeroes), '400'], [member('sha-256', content), '200']] as const) {
      const read = new Promise<void>((resolve) => { firstRead = resolve })
      // All at once, the second write is empty: the reader has read before the content ends.
      const answer = await sendInTwo(port, { 'content-type': 'application/x-none', 'content-digest': digest }, content, cut, cut === content.length ? Promise.resolve() : read)
      t.equal(answer, status, `${cut === content.length ? 'one write' : 'two writes'}, the digest of ${status === '200' ? 'what was sent' : 'zeroes'}: ${status}`)
    }
  }
})
