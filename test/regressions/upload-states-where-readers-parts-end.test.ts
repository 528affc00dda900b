// Found by the fresh-clone CI of the declared-length hold-back (ae53ab7): readers of content with a
// Content-Length get a chunk that straddles the content's last kilobyte in two parts, and a resumable
// upload's reader, cut short after the first, asked stateAt() for an offset inside a chunk, where no
// running state was saved: it got null, and the bytes it read could not be kept. The upload now saves
// a state where each part ends. A multipart creation, whose held close-delimiter start may split a
// chunk received earlier, keeps the old hold: its readers' parts end where chunks end.
import { createHash } from 'node:crypto'
import { connect as h2connect } from 'node:http2'
import t from 'tap'
import Fastify, { type FastifyInstance, type FastifyRequest } from 'fastify'
import fastifyDigestFields, { type ResumableUpload } from '../../lib/index.js'
import { fuzzSeed, listen, rawConnection, seededBytes, type Tap } from '../helpers.js'

t.comment(`seed ${fuzzSeed}`)
const data = seededBytes(5000, fuzzSeed)
const reprDigest = (content: Buffer): string => `sha-256=:${createHash('sha256').update(content).digest('base64')}:`

interface Ended { read: number, state: string | null }

/**
 * A resumable route whose handler reads the content, keeping what it read when the content fails.
 * `arrived(n)` resolves once the connection has pushed n bytes and the plugin has taken them.
 */
async function server (t: Tap, http2: boolean): Promise<{ app: FastifyInstance, port: number, arrived: (bytes: number) => Promise<void>, ended: Promise<Ended> }> {
  const app = Fastify({ http2 } as object) as unknown as FastifyInstance
  t.teardown(() => app.close())
  await app.register(fastifyDigestFields)
  app.removeAllContentTypeParsers()
  app.addContentTypeParser('*', (_request, _payload, done) => { done(null) })
  const waits: Array<{ bytes: number, resolve: () => void }> = []
  let end: (ended: Ended) => void = () => {}
  const ended = new Promise<Ended>((resolve) => { end = resolve })
  let stored = ''
  const handler = async (request: FastifyRequest): Promise<string> => {
    const upload = request.resumableUpload as ResumableUpload
    // The plugin took over the stream's push() before the handler: this one sees chunks arrive.
    const push = request.raw.push
    let pushed = 0
    const tell = (): void => { for (const wait of waits) if (pushed >= wait.bytes) wait.resolve() }
    request.raw.push = function (chunk: Buffer | null) {
      const more = push.call(this, chunk)
      pushed += chunk?.length ?? 0
      tell()
      return more
    }
    tell()
    let read = 0
    let state: string | null
    try {
      for await (const chunk of request.raw) read += (chunk as Buffer).length
      state = upload.state()
    } catch {
      state = upload.stateAt(upload.offset + read)
    }
    stored = state ?? ''
    end({ read, state })
    return 'stored'
  }
  app.post('/', { config: { digest: { resumable: { creation: true } } } }, handler)
  app.patch('/', { config: { digest: { resumable: { loadState: () => stored } } } }, handler)
  const arrived = async (bytes: number): Promise<void> => { await new Promise<void>((resolve) => waits.push({ bytes, resolve })) }
  return { app, port: await listen(app), arrived, ended }
}

/**
 * Sends a creation of the whole of `content`: once the handler runs, its bytes up to each of `ends`
 * in a write, each once the one before arrived; then cuts it.
 */
async function createCut (t: Tap, port: number, http2: boolean, type: string, content: Buffer, ends: number[], arrived: (bytes: number) => Promise<void>): Promise<void> {
  const fields = { 'content-type': type, 'content-length': String(content.length), 'upload-complete': '?1', 'repr-digest': reprDigest(content) }
  let write: (bytes: Buffer) => void
  let cut: () => void
  if (http2) {
    const session = h2connect(`http://127.0.0.1:${port}`)
    session.on('error', () => {})
    t.teardown(() => session.destroy())
    const stream = session.request({ ':method': 'POST', ':path': '/', ...fields }, { endStream: false })
    stream.on('error', () => {})
    write = (bytes) => stream.write(bytes)
    cut = () => session.destroy()
  } else {
    const { socket } = await rawConnection(port)
    socket.write([['POST / HTTP/1.1', 'Host: localhost', ...Object.entries(fields).map(([name, value]) => `${name}: ${value}`)].join('\r\n'), '', ''].join('\r\n'))
    write = (bytes) => socket.write(bytes)
    cut = () => socket.destroy()
  }
  // The handler runs once the head arrived: what arrives from then on is seen.
  await arrived(0)
  let sent = 0
  for (const end of ends) {
    write(content.subarray(sent, end))
    sent = end
    await arrived(sent)
  }
  cut()
}

/** Completes the upload from the state stored, with the rest of `content`: the creation's Repr-Digest is compared. */
async function complete (app: FastifyInstance, content: Buffer, offset: number): Promise<number> {
  const response = await app.inject({
    method: 'PATCH',
    url: '/',
    headers: { 'content-type': 'application/partial-upload', 'upload-offset': String(offset), 'upload-complete': '?1' },
    payload: content.subarray(offset)
  })
  return response.statusCode
}

for (const http2 of [false, true]) {
  t.test(`${http2 ? 'HTTP/2' : 'HTTP/1.1'}: a creation cut after the part before its last kilobyte keeps that part`, async (t) => {
    const { app, port, arrived, ended } = await server(t, http2)
    await createCut(t, port, http2, 'application/octet-stream', data, [4500], arrived)
    const { read, state } = await ended
    t.equal(read, data.length - 1024, 'the reader had the bytes before the content\'s last kilobyte, of one chunk of 4500')
    t.not(state, null, 'stateAt() gives the state of the bytes it read')
    t.equal(JSON.parse(state ?? '{}').offset, read)
    t.equal(await complete(app, data, read), 200, 'and the upload completed from there verifies whole')
  })
}

t.test('a multipart creation: its reader\'s parts end at chunk ends, each with its state', async (t) => {
  const { app, port, arrived, ended } = await server(t, false)
  // The first part ends with what may begin the close delimiter \r\n--BB, which is held.
  const content = Buffer.from(data)
  content.write('\r\n--B', 2000 - 5, 'latin1')
  await createCut(t, port, false, 'multipart/form-data; boundary=BB', content, [2000, 3500], arrived)
  const { read, state } = await ended
  t.equal(read, 2000, 'the reader had the first chunk once the second arrived (the last kilobyte received held)')
  t.not(state, null, 'stateAt() gives the state of the bytes it read')
  t.equal(await complete(app, content, read), 200, 'and the upload completed from there verifies whole')
})
