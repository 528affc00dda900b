import { createHash } from 'node:crypto'
import { EventEmitter, once } from 'node:events'
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { connect as h2connect } from 'node:http2'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import Fastify, { type FastifyInstance, type FastifyRequest } from 'fastify'
import fastifyDigestFields, { type ResumableUpload } from '../../lib/index.js'
import { request } from 'undici'
import { listen, rawRequest, type Tap } from '../helpers.js'

// Issue 19, part 3: what an independent attack on resumable uploads found, given only the README
// and docs/resumable-uploads.md, each pinned here.

type BuildServer = (options: { uploadDir: string, logger: boolean }) => Promise<FastifyInstance>
interface Lock { release: () => void }
interface Locks {
  acquire: (id: string, request: object, reply: object) => Promise<void>
  within: (request: { uploadLock: Lock }, work: (signal: AbortSignal) => Promise<unknown>) => Promise<unknown>
}
const example = await import('../../examples/resumable-upload-server.js' as string) as {
  buildServer: BuildServer
  UploadLocks: new () => Locks
}

const member = (data: string | Buffer): string => `sha-256=:${createHash('sha256').update(data).digest('base64')}:`

async function exampleServer (t: Tap): Promise<{ origin: string, port: number, uploadDir: string }> {
  const uploadDir = mkdtempSync(join(tmpdir(), 'resumable-attack-'))
  t.teardown(() => rmSync(uploadDir, { recursive: true, force: true }))
  const app = await example.buildServer({ uploadDir, logger: false })
  t.teardown(async () => await app.close())
  const port = await listen(app)
  return { origin: `http://127.0.0.1:${port}`, port, uploadDir }
}

t.test('F1: a request on an upload resource is never taken for a new upload, whatever its content type', async (t) => {
  const { port, uploadDir } = await exampleServer(t)
  const created = await rawRequest(port, ['POST /resumable HTTP/1.1', 'Host: localhost', 'Upload-Complete: ?0',
    `Repr-Digest: ${member('the genuine upload')}`, 'Content-Length: 10'], [Buffer.from('the genuin')])
  t.equal(created.status, 201)
  const location = created.headers.location as string
  const id = location.split('/').pop() as string
  const heads = [
    ['Content-Type: text/plain'],
    ['Content-Type: application/offset+octet-stream'],
    [],
    // Node keeps the first of two Content-Type lines.
    ['Content-Type: text/plain', 'Content-Type: application/partial-upload']
  ]
  for (const head of heads) {
    for (const complete of ['?0', '?1']) {
      const answer = await rawRequest(port, [`PATCH ${location} HTTP/1.1`, 'Host: localhost', ...head,
        `Upload-Complete: ${complete}`, 'Upload-Offset: 0', 'Content-Length: 4'], [Buffer.from('evil')])
      t.equal(answer.status, 400, `${head.join(', ') || 'no Content-Type'}, Upload-Complete: ${complete}`)
      t.match(JSON.parse(answer.body).detail, /this resource takes appends to its upload/)
    }
  }
  t.equal(readFileSync(join(uploadDir, `${id}.part`), 'utf8'), 'the genuin', 'the upload is as it was')
  t.match(JSON.parse(readFileSync(join(uploadDir, `${id}.json`), 'utf8')).state, /"expected":\{"sha-256"/, 'with its digest')
  const append = await rawRequest(port, ['POST /resumable HTTP/1.1', 'Host: localhost', 'Content-Type: application/partial-upload',
    'Upload-Complete: ?1', 'Upload-Offset: 0', 'Content-Length: 1'], [Buffer.from('x')])
  t.equal(append.status, 400, 'nor is an append taken by the resource that creates uploads')
  t.match(JSON.parse(append.body).detail, /this resource creates uploads/)
  t.same(readdirSync(uploadDir).sort(), ['.locks', `${id}.json`, `${id}.part`])
})

/** A request and its reply as the example's lock sees them: destroying the request closes its response, as Node does. */
function party (): { request: { raw: { destroy: () => void }, uploadLock: Lock }, reply: { raw: EventEmitter } } {
  const reply = { raw: Object.assign(new EventEmitter(), { writableFinished: false }) }
  const request = { raw: { destroy: () => reply.raw.emit('close') }, uploadLock: null as unknown as Lock }
  return { request, reply }
}

t.test('F2: a request ended while it waited for an upload does not let the next one in ahead of the one running', async (t) => {
  const locks = new example.UploadLocks()
  const running = party()
  await locks.acquire('u', running.request, running.reply)
  let finishRunning = (): void => {}
  const work = locks.within(running.request, async () => await new Promise<void>((resolve) => { finishRunning = resolve }))
  const waiting = party()
  const waited = locks.acquire('u', waiting.request, waiting.reply)
  const next = party()
  let nextIn = false
  const entered = locks.acquire('u', next.request, next.reply).then(() => { nextIn = true })
  // The request that waited was ended by the next one, and has let its own turn go: the next one
  // still waits for the one in its handler.
  await new Promise((resolve) => setImmediate(resolve))
  t.equal(nextIn, false, 'the next request waits for the one in its handler')
  finishRunning()
  await work
  await entered
  t.equal(nextIn, true, 'and goes in once it is done')
  await waited
  const refused = await locks.within(waiting.request, async () => 'ran').catch((error: { statusCode: number }) => error.statusCode)
  t.equal(refused, 409, 'the ended one does not run')
})

/** An HTTP/2 app whose handler reads each request's content, telling `events` of its first chunk and how it ended. */
async function http2App (t: Tap): Promise<{ port: number, events: EventEmitter }> {
  const app = Fastify({ http2: true } as object) as unknown as FastifyInstance
  t.teardown(async () => await app.close())
  await app.register(fastifyDigestFields)
  app.addContentTypeParser('*', (_request, _payload, done) => done(null))
  let state: string | undefined
  const events = new EventEmitter()
  const handler = async (request: FastifyRequest): Promise<string> => {
    const upload = request.resumableUpload as ResumableUpload
    let received = 0
    let outcome: string
    try {
      for await (const chunk of request.raw) {
        if (received === 0) events.emit('chunk')
        received += (chunk as Buffer).length
      }
      state = upload.state()
      outcome = `ended after ${received} bytes`
    } catch (error) {
      outcome = `${(error as Error).message} after ${received} bytes`
    }
    events.emit('outcome', `${outcome}, state at ${JSON.parse(upload.state()).offset}`)
    return outcome
  }
  // A request that asks for it is held here until its client has left.
  const loadState = async (request: FastifyRequest): Promise<string | undefined> => {
    if (request.headers['x-wait'] === undefined) return state
    const aborted = once(request.raw, 'aborted')
    events.emit('loading')
    await aborted
    return state
  }
  app.post('/', { config: { digest: { resumable: { creation: true } } } }, handler)
  app.patch('/', { config: { digest: { resumable: { loadState } } } }, handler)
  return { port: await listen(app), events }
}

t.test('F3: an HTTP/2 append whose client resets the stream is not taken as complete', async (t) => {
  const { port, events } = await http2App(t)
  const session = h2connect(`http://127.0.0.1:${port}`)
  t.teardown(() => session.close())
  const send = async (headers: Record<string, string>, content: string): Promise<number> => {
    const stream = session.request(headers)
    stream.end(content)
    const [response] = await once(stream, 'response') as [Record<string, string>]
    stream.resume()
    return Number(response[':status'])
  }
  const created = once(events, 'outcome')
  t.equal(await send({ ':method': 'POST', ':path': '/', 'upload-complete': '?0', 'repr-digest': member('abcdefghij') }, 'abcde'), 200)
  t.same(await created, ['ended after 5 bytes, state at 5'])
  const append = { ':method': 'PATCH', ':path': '/', 'content-type': 'application/partial-upload', 'upload-offset': '5' }
  for (const complete of ['?0', '?1']) {
    const stream = session.request({ ...append, 'upload-complete': complete })
    stream.on('error', () => {})
    const started = once(events, 'chunk')
    const outcome = once(events, 'outcome')
    // In several chunks, more than the kilobyte held back until the end, so that the handler sees some.
    for (let i = 0; i < 4; i++) stream.write(Buffer.alloc(16384, 'f'))
    // Reset without an end of stream once the handler has the first bytes: the client left.
    await started
    stream.destroy()
    t.match(await outcome, [/^(aborted|Premature close) after \d+ bytes, state at 5$/], `Upload-Complete: ${complete}: the upload stays at its offset`)
  }
  // Reset while the upload's state is loaded, before the plugin takes the content over.
  const early = session.request({ ...append, 'upload-complete': '?1', 'x-wait': '1' })
  early.on('error', () => {})
  const loading = once(events, 'loading')
  const earlyOutcome = once(events, 'outcome')
  early.write(Buffer.alloc(16384, 'f'))
  await loading
  early.destroy()
  t.match(await earlyOutcome, [/^(aborted|Premature close) after 0 bytes, state at 5$/], 'nor when it left while the state was loaded')
  const resumed = once(events, 'outcome')
  t.equal(await send({ ...append, 'upload-complete': '?1' }, 'fghij'), 200, 'and completes when the client resumes from there')
  t.same(await resumed, ['ended after 5 bytes, state at 10'])
})

t.test('F4: an upload\'s Repr-Digest in a trailer section is refused, not ignored', async (t) => {
  const { port, uploadDir } = await exampleServer(t)
  const trailer = ['POST /resumable HTTP/1.1', 'Host: localhost', 'Upload-Complete: ?1', 'Transfer-Encoding: chunked']
  const announced = await rawRequest(port, [...trailer, 'Trailer: Repr-Digest'])
  t.equal(announced.status, 400, 'announced: refused before the content')
  t.match(JSON.parse(announced.body).detail, /the Repr-Digest of an upload goes in the header section of its creation/)
  const body = Buffer.from(`5\r\nwrong\r\n0\r\nRepr-Digest: ${member('right')}\r\n\r\n`)
  const unannounced = await rawRequest(port, trailer, [body])
  t.equal(unannounced.status, 400, 'unannounced: refused at the end')
  t.match(JSON.parse(unannounced.body).detail, /the Repr-Digest of an upload goes in the header section of its creation/)
  // Second round: the refused creation left an upload without its digest, and named it.
  t.equal(unannounced.headers.location, undefined, 'no upload is named')
  t.same(readdirSync(uploadDir), ['.locks'], 'and none is left')
})

t.test('second round: a request that left while it waited does not open the upload to the next one', async (t) => {
  const locks = new example.UploadLocks()
  const running = party()
  await locks.acquire('u', running.request, running.reply)
  let finishRunning = (): void => {}
  let aborted = false
  const work = locks.within(running.request, async (signal: AbortSignal) => {
    signal.addEventListener('abort', () => { aborted = true })
    await new Promise<void>((resolve) => { finishRunning = resolve })
  })
  const waiting = party()
  const waited = locks.acquire('u', waiting.request, waiting.reply)
  t.equal(aborted, true, 'the running request is told to stop, which ends a pipeline Node would leave unsettled')
  // Its own client leaves while it waits.
  waiting.reply.raw.emit('close')
  const next = party()
  let nextIn = false
  const entered = locks.acquire('u', next.request, next.reply).then(() => { nextIn = true })
  await new Promise((resolve) => setImmediate(resolve))
  t.equal(nextIn, false, 'the next request still waits for the one in its handler')
  finishRunning()
  await work
  await entered
  await waited
  t.equal(nextIn, true)
})

t.test('second round: an append taken over right after its content arrived leaves the upload usable', async (t) => {
  const { origin } = await exampleServer(t)
  const created = await request(`${origin}/resumable`, { method: 'POST', headers: { 'upload-complete': '?0' }, body: 'first' })
  await created.body.dump()
  const location = origin + String(created.headers.location)
  const append = { 'content-type': 'application/partial-upload', 'upload-complete': '?0', 'upload-offset': '5' }
  for (let i = 0; i < 20; i++) {
    const head = await request(location, { method: 'HEAD' })
    await head.body.dump()
    const offset = String(head.headers['upload-offset'])
    const first = request(location, { method: 'PATCH', headers: { ...append, 'upload-offset': offset }, body: 'more' })
    const second = request(location, { method: 'PATCH', headers: { ...append, 'upload-offset': offset }, body: 'more' })
    for (const settled of await Promise.allSettled([first, second])) if (settled.status === 'fulfilled') await settled.value.body.dump()
  }
  const head = await request(location, { method: 'HEAD' })
  await head.body.dump()
  t.equal(head.statusCode, 204, 'the upload still answers')
  t.equal((Number(head.headers['upload-offset']) - 5) % 4, 0, 'at an offset made of whole appends')
})
