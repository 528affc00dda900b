// The bytes of an append or creation cut short (draft-ietf-httpbis-resumable-upload-15 section
// 4.4.2: a server SHOULD keep as much of them as it can): request.resumableUpload.stateAt() gives
// the state of exactly the bytes the application kept, so that the whole upload still verifies.
// The application here keeps every chunk it read; the oracles are a model of the upload's bytes
// and Node's createHash over the bytes sent.
import { createHash } from 'node:crypto'
import { once } from 'node:events'
import { connect } from 'node:net'
import { Readable } from 'node:stream'
import t from 'tap'
import Fastify, { type FastifyRequest } from 'fastify'
import fastifyDigestFields, { type ResumableUpload } from '../../lib/index.js'
import { fuzzSeed, listen, seededBytes, seededRandom, type Tap } from '../helpers.js'

t.comment(`seed ${fuzzSeed} (DIGEST_FUZZ_SEED replays it)`)
const random = seededRandom(fuzzSeed)
const int = (below: number): number => Math.floor(random() * below)
const sha256 = (data: Buffer): string => createHash('sha256').update(data).digest('base64')

interface Ended { read: number, kept: number, state: string | null, upload: ResumableUpload }

/**
 * POST / creates, PATCH / appends. Each handler reads the content chunk by chunk into `store.bytes`;
 * when the content fails (the client left), it keeps what it read if stateAt() gives its state.
 * `started` resolves once a handler has read a first chunk, `ended` when it is done.
 */
async function build (t: Tap): Promise<{ port: number, store: { bytes: Buffer, state: string }, next: () => { started: Promise<void>, ended: Promise<Ended> } }> {
  const app = Fastify()
  t.teardown(async () => await app.close())
  await app.register(fastifyDigestFields)
  app.removeAllContentTypeParsers()
  app.addContentTypeParser('*', (_request, _payload, done) => done(null))
  const store = { bytes: Buffer.alloc(0), state: '' }
  let waiting: { started: () => void, ended: (ended: Ended) => void } | null = null
  const next = (): { started: Promise<void>, ended: Promise<Ended> } => {
    let started = (): void => {}
    let ended = (_ended: Ended): void => {}
    const promises = { started: new Promise<void>((resolve) => { started = resolve }), ended: new Promise<Ended>((resolve) => { ended = resolve }) }
    waiting = { started, ended }
    return promises
  }
  const handler = async (request: FastifyRequest): Promise<string> => {
    const upload = request.resumableUpload as ResumableUpload
    const told = waiting
    let read = 0
    let state: string | null
    try {
      for await (const chunk of request.raw) {
        store.bytes = Buffer.concat([store.bytes.subarray(0, upload.offset + read), chunk as Buffer])
        read += (chunk as Buffer).length
        told?.started()
      }
      state = upload.state()
    } catch {
      state = upload.stateAt(upload.offset + read)
    }
    const kept = state === null ? 0 : read
    store.bytes = store.bytes.subarray(0, upload.offset + kept)
    store.state = state ?? upload.state({ contentKept: false })
    told?.ended({ read, kept, state, upload })
    return 'stored'
  }
  app.post('/', { config: { digest: { resumable: { creation: true } } } }, handler)
  app.patch('/', { config: { digest: { resumable: { loadState: () => store.state } } } }, handler)
  return { port: await listen(app), store, next }
}

/**
 * Sends a request's head and `first` over HTTP/1.1, then, once `started` (the handler read a chunk)
 * unless null, `more`; then cuts it, or, for a `whole` request, waits for the answer. (Over HTTP/2
 * the plugin holds the end of what arrived until the stream ends, since a trailer section may
 * follow: a handler may see no chunk before a cut.)
 */
async function sendCut (port: number, head: Record<string, string>, first: Buffer, more: Buffer, started: Promise<void> | null, whole = false): Promise<void> {
  const socket = connect({ host: '127.0.0.1', port })
  socket.on('error', () => {})
  await once(socket, 'connect')
  const answered = new Promise((resolve) => {
    socket.once('data', resolve)
    socket.once('close', resolve)
  })
  const { ':method': method, ':path': path, ...fields } = head
  socket.write([`${method} ${path} HTTP/1.1`, 'Host: localhost', ...Object.entries(fields).map(([k, v]) => `${k}: ${v}`), '', ''].join('\r\n'))
  socket.write(first)
  if (started !== null) await started
  socket.write(more)
  await (whole ? answered : new Promise((resolve) => setImmediate(resolve)))
  socket.destroy()
}

t.test('appends cut short at random, kept up to the last chunk read, and the upload still verifies', async (t) => {
  const { port, store, next } = await build(t)
  for (let round = 0; round < 6; round++) {
    const data = seededBytes(1 + int(300_000), int(2 ** 31))
    let offset = 0
    for (let request = 0; offset < data.length && request < 8; request++) {
      const creation = request === 0
      const head = {
        ':method': creation ? 'POST' : 'PATCH',
        ':path': '/',
        'Upload-Complete': '?1',
        ...(creation ? { 'Repr-Digest': `sha-256=:${sha256(data)}:` } : { 'Content-Type': 'application/partial-upload', 'Upload-Offset': String(offset) }),
        'Content-Length': String(data.length - offset)
      }
      const rest = data.subarray(offset)
      const cut = 1 + int(rest.length)
      const first = int(cut) + 1
      const { started, ended } = next()
      // Now and then, and after four cuts, a whole request, which completes the upload.
      const whole = request >= 4 || int(4) === 0
      const sent = whole ? rest.length : cut
      // Readers get the content but for its last kilobyte as it arrives; of less, nothing before its end.
      const early = !whole && rest.length > 1024
      await sendCut(port, head, rest.subarray(0, Math.min(first, sent)), rest.subarray(Math.min(first, sent), sent), early ? started : null, whole)
      const { kept, state, upload } = await ended
      t.not(state, null, `round ${round}, at ${offset}: the state of the ${kept} bytes read is given`)
      t.ok(kept >= (early || whole ? 1 : 0) && kept <= sent, `${early || whole ? 'at least the first chunk' : 'nothing of a request within its last kilobyte'}, at most the ${sent} bytes sent`)
      offset += kept
      t.equal(JSON.parse(store.state).offset, offset, 'the state covers the bytes kept')
      t.ok(store.bytes.equals(data.subarray(0, offset)), 'which are the bytes sent')
      if (offset === data.length) t.same(upload.digests(), { 'sha-256': createHash('sha256').update(data).digest() }, `round ${round}: the upload verified whole`)
    }
    t.equal(offset, data.length, `round ${round} completed`)
  }
})

t.test('no part of a request that carries a digest of its own content is kept', async (t) => {
  const { port, store, next } = await build(t)
  const data = seededBytes(100_000, 11)
  const created = next()
  await sendCut(port, { ':method': 'POST', ':path': '/', 'Upload-Complete': '?0', 'Content-Length': '1000' }, data.subarray(0, 1000), Buffer.alloc(0), created.started, true)
  t.equal((await created.ended).state, store.state, 'a creation, whole')
  for (const field of ['Content-Digest: sha-256=:' + sha256(data.subarray(1000)) + ':', 'Unencoded-Digest: sha-256=:' + sha256(data.subarray(1000)) + ':', 'Trailer: Content-Digest']) {
    const [name, value] = field.split(': ') as [string, string]
    const { started, ended } = next()
    const head = { ':method': 'PATCH', ':path': '/', 'Content-Type': 'application/partial-upload', 'Upload-Offset': '1000', 'Upload-Complete': '?0', [name]: value }
    // Two chunks: of content of unknown length, readers get a chunk once a kilobyte more arrived.
    const chunks = Buffer.concat([Buffer.from('1000\r\n'), data.subarray(1000, 5096), Buffer.from('\r\n1000\r\n'), data.subarray(5096, 9192)])
    await sendCut(port, { ...head, 'Transfer-Encoding': 'chunked' }, chunks, Buffer.alloc(0), started)
    const { read, state, upload } = await ended
    t.ok(read > 0, `${name}: content was read before the cut`)
    t.equal(state, null, `${name}: no state of a part is given`)
    t.equal(upload.stateAt(1000), store.state, 'but the one it started from is')
    t.equal(JSON.parse(store.state).offset, 1000)
  }
})

t.test('stateAt: the last 64 chunk ends, the start, and nothing of a failed upload', async (t) => {
  const app = Fastify()
  t.teardown(async () => await app.close())
  await app.register(fastifyDigestFields)
  app.removeAllContentTypeParsers()
  app.addContentTypeParser('*', (_request, _payload, done) => done(null))
  let seen: { upload: ResumableUpload, ends: number[] } | null = null
  app.post('/', { config: { digest: { resumable: { creation: true } } } }, async (request) => {
    const upload = request.resumableUpload as ResumableUpload
    const ends: number[] = []
    try {
      for await (const chunk of request.raw) ends.push((ends.at(-1) ?? 0) + (chunk as Buffer).length)
    } catch {}
    seen = { upload, ends }
    return 'read'
  })
  const chunks = Array.from({ length: 100 }, (_, i) => Buffer.alloc(10, i))
  await app.inject({ method: 'POST', url: '/', headers: { 'upload-complete': '?0' }, payload: Readable.from(chunks) })
  const { upload, ends } = seen as unknown as { upload: ResumableUpload, ends: number[] }
  t.equal(ends.at(-1), 1000)
  t.same(JSON.parse(upload.stateAt(1000) as string), JSON.parse(upload.state()), 'the end of verified content is state()')
  t.equal(JSON.parse(upload.stateAt(1000 - 630) as string).offset, 370, 'a chunk end among the last 64')
  t.equal(upload.stateAt(1000 - 640), null, 'one older is not kept')
  t.equal(upload.stateAt(995), null, 'nor is a point within a chunk')
  for (const offset of ['370', [370], { valueOf: () => 370 }, 370.5, Number.NaN, null]) {
    t.equal(upload.stateAt(offset as unknown as number), null, `nor ${JSON.stringify(offset)}, which is not a whole number`)
  }
  t.equal(JSON.parse(upload.stateAt(0) as string).offset, 0, 'the start is')
  await app.inject({ method: 'POST', url: '/', headers: { 'upload-complete': '?1', 'repr-digest': `sha-256=:${sha256(Buffer.from('bytes'))}:` }, payload: 'bytes' })
  const completed = (seen as unknown as { upload: ResumableUpload }).upload
  t.match(JSON.parse(completed.state()), { complete: true, offset: 5, length: 5 }, 'a completing request\'s state() completes the upload')
  t.match(JSON.parse(completed.stateAt(5) as string), { offset: 5, length: 5 }, 'its stateAt() keeps all of it')
  t.notOk(JSON.parse(completed.stateAt(5) as string).complete, 'but not as complete')
  const failed = await app.inject({ method: 'POST', url: '/', headers: { 'upload-complete': '?1', 'repr-digest': `sha-256=:${sha256(Buffer.from('other'))}:` }, payload: 'bytes' })
  t.equal(failed.statusCode, 400)
  t.equal((seen as unknown as { upload: ResumableUpload }).upload.stateAt(0), null, 'a failed upload gives no state')
})
