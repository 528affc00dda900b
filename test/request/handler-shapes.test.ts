import { createHash } from 'node:crypto'
import { once } from 'node:events'
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { connect as h2connect, type ClientHttp2Session, type OutgoingHttpHeaders, type ServerHttp2Session } from 'node:http2'
import { connect, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { type Readable, Writable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import t from 'tap'
import fc from 'fast-check'
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify'
import fastifyMultipart from '@fastify/multipart'
import fastifyDigestFields from '../../lib/index.js'
import { fuzzScale, fuzzSeed, listen, problemTypes, randomChunks, seededBytes, seededRandom, watchProcess, type RawResponse } from '../helpers.js'

// Random handler shapes against random uploads. Every wait the plugin adds (a success reply held
// for its verdict, digestVerdict(), commit()) waits for the content's readers, and cuts off one
// that holds the content still for stallTimeout. Whatever the handler does with whatever upload,
// over whichever transport:
//
// - the request is answered: with the problem when its digest failed (or the handler's own 500 when
//   it threw first), otherwise with the success the handler chose, or its 500 when it threw;
// - no reader gets fewer bytes than were sent to it without an error, and none sees the end of
//   content whose digest failed; a reader of content that verified gets all of it, also when it
//   reads on after an early reply;
// - a committed file holds exactly the bytes sent, and nothing is committed (nor left behind) when
//   the digest failed.
//
// The clients always send the whole body, so no request may be ended as one whose client stalled.

t.comment(`seed ${fuzzSeed} (DIGEST_FUZZ_SEED replays it)`)
// A failure shrinks, over the network, for longer than a passing run takes.
t.setTimeout(300_000)

const stallTimeout = 150
const boundary = '----handler-shapes-7Hq2Zx9e'
// Every file and raw body is a slice of this pool, so that a case costs nothing to generate.
const pool = seededBytes(4 * 1024 * 1024, fuzzSeed)

const rawShapes = ['nothing', 'raw first chunk', 'raw pipeline', 'raw pipeline with verdict', 'raw save then commit', 'raw save with commit'] as const
const multipartShapes = ['file toBuffer', 'file first chunk', 'some parts', 'all parts', 'all parts then verdict', 'parts saved then commit', 'file saved with commit'] as const
type Shape = typeof rawShapes[number] | typeof multipartShapes[number]
// early: reply.send() before reading, reading on in the background; late: reply after reading;
// throw: throw once something was read, the reading going on in the background.
type When = 'early' | 'late' | 'throw'
type Transport = 'h1 length' | 'h1 chunked' | 'h2'
type Digest = 'right' | 'wrong' | 'none'

interface Case {
  kind: 'multipart' | 'raw'
  sizes: number[]
  // The file index before which a text field goes (past the last: after it), or null for none.
  field: number | null
  digest: Digest
  transport: Transport
  shape: Shape
  when: When
  // How many files 'some parts' reads before it leaves the loop.
  some: number
  // About how many writes the client sends the body in.
  pieces: number
  offset: number
  chunkSeed: number
}

/** The bytes of a case: each file's data, and the whole body as sent. */
interface Upload {
  files: Buffer[]
  body: Buffer
  // Whether the last file is the last part of the body: its end then waits for the verdict.
  lastFileLast: boolean
}

function upload (c: Case): Upload {
  let at = c.offset % pool.length
  const files = c.sizes.map((size) => {
    if (at + size > pool.length) at = 0
    const data = pool.subarray(at, at + size)
    at += size
    return data
  })
  if (c.kind === 'raw') return { files, body: files[0] as Buffer, lastFileLast: true }
  const pieces: Buffer[] = []
  const field = (): void => {
    pieces.push(Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="note"\r\n\r\nsome text\r\n`))
  }
  files.forEach((data, i) => {
    if (c.field === i) field()
    pieces.push(Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="f${i}"; filename="f${i}.bin"\r\n` +
      'Content-Type: application/octet-stream\r\n\r\n'), data, Buffer.from('\r\n'))
  })
  const fieldLast = c.field !== null && c.field >= files.length
  if (fieldLast) field()
  pieces.push(Buffer.from(`--${boundary}--\r\n`))
  return { files, body: Buffer.concat(pieces), lastFileLast: !fieldLast }
}

/** What one reader got. */
interface ReaderLog {
  what: string
  // The bytes sent to it, or null for a reader that takes only a first chunk.
  expected: number | null
  // Whether it reads the end of the content (the raw body, or a file that is the body's last part).
  last: boolean
  got: number
  ended: boolean
  error: (Error & { code?: string }) | null
}

/** What the handler of one case did. */
interface Log {
  readers: ReaderLog[]
  // The files saved, with the bytes each must hold once committed.
  saved: Array<{ destination: string, data: Buffer }>
  committed: boolean
  commitError: (Error & { code?: string }) | null
  // The handler's reading, which goes on in the background after an early reply or a throw; never rejects.
  done: Promise<void>
  // Resolves once some reader got a chunk, or the reading ended.
  someRead: Promise<void>
}

const uploads = new Map<string, Upload>()
const logs = new Map<string, Log>()
const folder = mkdtempSync(join(tmpdir(), 'handler-shapes-'))
t.teardown(() => rmSync(folder, { recursive: true, force: true }))

function counter (log: ReaderLog, onData: () => void): Writable {
  return new Writable({
    write (chunk: Buffer, _encoding, callback) {
      log.got += chunk.length
      onData()
      callback()
    }
  })
}

/** Runs a reader, logging how it ended; rethrows its error. */
async function track (log: ReaderLog, reading: Promise<unknown>): Promise<void> {
  try {
    await reading
    log.ended = true
  } catch (error) {
    log.error = error as Error
    throw error
  }
}

/** Takes the first chunk of request.raw (or its end) and leaves it paused without a pipe, as a sniffing reader does. */
async function firstChunk (stream: Readable, log: ReaderLog, onData: () => void): Promise<void> {
  if (stream.errored !== null) {
    log.error = stream.errored
    throw stream.errored
  }
  if (stream.readableEnded) {
    log.ended = true
    return
  }
  await new Promise<void>((resolve, reject) => {
    const finish = (): void => {
      stream.off('data', data)
      stream.off('end', end)
      stream.off('error', error)
      stream.off('close', close)
    }
    const data = (chunk: Buffer): void => {
      stream.pause()
      finish()
      log.got += chunk.length
      onData()
      resolve()
    }
    const end = (): void => { finish(); log.ended = true; resolve() }
    const error = (cause: Error): void => { finish(); log.error = cause; reject(cause) }
    const close = (): void => {
      finish()
      const cause = stream.errored ?? new Error('closed before its first chunk, without an error')
      log.error = cause
      reject(cause)
    }
    stream.on('data', data)
    stream.once('end', end)
    stream.once('error', error)
    stream.once('close', close)
  })
}

type Files = ReturnType<FastifyRequest['verifiedFiles']>

/** The reading of a handler shape, every reader logged. */
async function read (request: FastifyRequest, c: Case, id: string, log: Log, onData: () => void): Promise<void> {
  const data = uploads.get(id) as Upload
  const reader = (what: string, expected: number | null, last: boolean): ReaderLog => {
    const entry: ReaderLog = { what, expected, last, got: 0, ended: false, error: null }
    log.readers.push(entry)
    return entry
  }
  const file = (index: number): ReaderLog =>
    reader(`file ${index}`, data.files[index]?.length ?? 0, data.lastFileLast && index === data.files.length - 1)
  const save = async (files: Files, stream: Readable, name: string, bytes: Buffer): Promise<void> => {
    const destination = join(folder, `${id}-${name}.bin`)
    log.saved.push({ destination, data: bytes })
    await files.save(stream, destination)
    onData()
  }
  const commit = async (files: Files): Promise<void> => {
    try {
      await files.commit()
      log.committed = true
    } catch (error) {
      log.commitError = error as Error
      throw error
    }
  }
  switch (c.shape) {
    case 'nothing':
      return
    case 'raw first chunk':
      await firstChunk(request.raw, reader('raw first chunk', null, true), onData)
      return
    case 'raw pipeline': {
      const raw = reader('raw', data.body.length, true)
      await track(raw, pipeline(request.raw, counter(raw, onData)))
      return
    }
    case 'raw pipeline with verdict': {
      const raw = reader('raw', data.body.length, true)
      await Promise.all([track(raw, pipeline(request.raw, counter(raw, onData))), request.digestVerdict()])
      return
    }
    case 'raw save then commit': {
      const files = request.verifiedFiles()
      await save(files, request.raw, 'raw', data.body)
      await commit(files)
      return
    }
    case 'raw save with commit': {
      const files = request.verifiedFiles()
      await Promise.all([save(files, request.raw, 'raw', data.body), commit(files)])
      return
    }
    case 'file toBuffer': {
      const part = await request.file()
      if (part === undefined) throw new Error('no file part')
      const first = file(0)
      await track(first, part.toBuffer().then((buffer) => { first.got = buffer.length; onData() }))
      return
    }
    case 'file first chunk': {
      const part = await request.file()
      if (part === undefined) throw new Error('no file part')
      const first = reader('file 0 first chunk', null, false)
      await track(first, (async () => {
        // As a loop left after its first chunk: return() destroys the file stream.
        const chunks = part.file[Symbol.asyncIterator]()
        const next = await chunks.next()
        if (next.done !== true) {
          first.got += (next.value as Buffer).length
          onData()
        }
        await chunks.return?.()
      })())
      return
    }
    case 'some parts':
    case 'all parts':
    case 'all parts then verdict':
    case 'parts saved then commit': {
      const files = c.shape === 'parts saved then commit' ? request.verifiedFiles() : null
      let index = 0
      for await (const part of request.parts()) {
        if (part.type !== 'file') continue
        if (c.shape === 'some parts' && index >= c.some) break
        if (files !== null) {
          await save(files, part.file, String(index), data.files[index] as Buffer)
        } else if (index % 2 === 0) {
          const each = file(index)
          await track(each, pipeline(part.file, counter(each, onData)))
        } else {
          const each = file(index)
          await track(each, part.toBuffer().then((buffer) => { each.got = buffer.length; onData() }))
        }
        index++
      }
      if (files !== null) await commit(files)
      if (c.shape === 'all parts then verdict') await request.digestVerdict()
      return
    }
    case 'file saved with commit': {
      const files = request.verifiedFiles()
      const part = await request.file()
      if (part === undefined) throw new Error('no file part')
      await Promise.all([save(files, part.file, '0', data.files[0] as Buffer), commit(files)])
    }
  }
}

async function handler (request: FastifyRequest, reply: FastifyReply): Promise<unknown> {
  const id = request.headers['x-case'] as string
  const c = JSON.parse(request.headers['x-shape'] as string) as Case
  let markRead = (): void => {}
  const log: Log = {
    readers: [],
    saved: [],
    committed: false,
    commitError: null,
    done: Promise.resolve(),
    someRead: new Promise<void>((resolve) => { markRead = resolve })
  }
  logs.set(id, log)
  if (c.when === 'early') {
    // Replies first, then reads in the background, starting in the same turn.
    reply.send({ early: true })
    log.done = read(request, c, id, log, markRead).catch(() => {})
    return reply
  }
  const reading = read(request, c, id, log, markRead)
  log.done = reading.then(() => {}, () => {}).finally(markRead)
  if (c.when === 'late') {
    await reading
    return { late: true }
  }
  await log.someRead
  throw new Error('the handler gave up')
}

async function server (http2: boolean): Promise<number> {
  // A request that nobody reads to its end once it was answered (a handler that stopped reading
  // or threw, on a request the plugin has no verdict to wait for) can keep its connection open
  // after its client left, with or without the plugin: the servers close them all when done.
  const app = Fastify({ http2: http2 as false, bodyLimit: 16 * 1024 * 1024, forceCloseConnections: true }) as FastifyInstance
  const sessions = new Set<ServerHttp2Session>()
  if (http2) {
    app.server.on('session', (session: ServerHttp2Session) => {
      sessions.add(session)
      session.once('close', () => sessions.delete(session))
    })
  }
  await app.register(fastifyDigestFields, { stallTimeout })
  await app.register(fastifyMultipart, { limits: { fileSize: 16 * 1024 * 1024 } })
  app.addContentTypeParser('application/octet-stream', (_request, _payload, done) => done(null))
  app.post('/upload', handler)
  t.teardown(async () => {
    for (const session of sessions) session.destroy()
    await app.close()
  })
  return await listen(app)
}

// Connections still open when the test ends (a case that failed by hanging), closed so that the
// servers can close.
const open = new Set<Socket | ClientHttp2Session>()

/**
 * The clients send the whole body whatever the server answers, and when. Once they have the whole
 * response they wait for `settled` (the handler's reading, which may go on after the answer)
 * before they leave: Node never ends nor fails a request whose client leaves after its response
 * finished, so a reader in the background would wait for ever.
 */
async function h1Request (port: number, head: string[], chunks: Buffer[], settled: () => Promise<void>): Promise<RawResponse> {
  const socket = connect({ host: '127.0.0.1', port })
  open.add(socket)
  socket.setNoDelay(true)
  socket.on('error', () => {})
  let received = Buffer.alloc(0)
  let response: RawResponse | null = null
  let markAnswered = (): void => {}
  const answered = new Promise<void>((resolve) => { markAnswered = resolve })
  socket.on('close', () => markAnswered())
  socket.on('data', (data: Buffer) => {
    received = Buffer.concat([received, data])
    response ??= complete(received)
    if (response !== null) markAnswered()
  })
  try {
    await once(socket, 'connect')
    socket.write([...head, '', ''].join('\r\n'))
    for (const chunk of chunks) {
      if (socket.destroyed) break
      socket.write(chunk)
      await new Promise((resolve) => setImmediate(resolve))
    }
    await answered
    await settled()
  } finally {
    socket.destroy()
    open.delete(socket)
  }
  return response ?? { status: Number.NaN, headers: {}, body: received.toString('latin1') }
}

/** The response in `received` once it is complete (by Content-Length, or a chunked body's last chunk), else null. */
function complete (received: Buffer): RawResponse | null {
  const end = received.indexOf('\r\n\r\n')
  if (end < 0) return null
  const [statusLine = '', ...lines] = received.subarray(0, end).toString('latin1').split('\r\n')
  const headers: Record<string, string> = {}
  for (const line of lines) {
    const colon = line.indexOf(':')
    headers[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim()
  }
  let body = received.subarray(end + 4)
  if (headers['transfer-encoding'] === 'chunked') {
    const decoded: Buffer[] = []
    for (let at = 0; ;) {
      const lineEnd = body.indexOf('\r\n', at)
      if (lineEnd < 0) return null
      const size = parseInt(body.subarray(at, lineEnd).toString('latin1'), 16)
      if (size === 0) break
      if (body.length < lineEnd + 2 + size + 2) return null
      decoded.push(body.subarray(lineEnd + 2, lineEnd + 2 + size))
      at = lineEnd + 2 + size + 2
    }
    body = Buffer.concat(decoded)
  } else {
    const length = Number(headers['content-length'] ?? 0)
    if (body.length < length) return null
    body = body.subarray(0, length)
  }
  return { status: Number(statusLine.split(' ')[1]), headers, body: body.toString('utf8') }
}

async function h2Send (port: number, headers: OutgoingHttpHeaders, chunks: Buffer[], settled: () => Promise<void>): Promise<RawResponse> {
  const session = h2connect(`http://127.0.0.1:${port}`)
  open.add(session)
  session.on('error', () => {})
  try {
    const stream = session.request(headers, { endStream: chunks.length === 0 })
    stream.on('error', () => {})
    const received: Buffer[] = []
    let responseHeaders: Record<string, string> = {}
    stream.on('response', (fields) => { responseHeaders = fields as Record<string, string> })
    stream.on('data', (chunk: Buffer) => received.push(chunk))
    // The response's end, or a reset.
    const answered = new Promise((resolve) => { stream.once('end', resolve); stream.once('close', resolve) })
    for (const [i, chunk] of chunks.entries()) {
      if (stream.destroyed) break
      if (i === chunks.length - 1) stream.end(chunk)
      else stream.write(chunk)
      await new Promise((resolve) => setImmediate(resolve))
    }
    await answered
    await settled()
    return { status: Number(responseHeaders[':status']), headers: responseHeaders, body: Buffer.concat(received).toString('utf8') }
  } finally {
    session.destroy()
    open.delete(session)
  }
}

async function send (ports: { h1: number, h2: number }, c: Case, id: string, data: Upload): Promise<RawResponse> {
  const headers: Record<string, string> = {
    'content-type': c.kind === 'raw' ? 'application/octet-stream' : `multipart/form-data; boundary=${boundary}`,
    'x-case': id,
    'x-shape': JSON.stringify(c)
  }
  if (c.digest !== 'none') {
    const digested = c.digest === 'right' ? data.body : Buffer.concat([data.body, Buffer.from('!')])
    headers['content-digest'] = `sha-256=:${createHash('sha256').update(digested).digest('base64')}:`
  }
  const chunks = randomChunks(data.body, Math.max(1, Math.ceil(2 * data.body.length / c.pieces)), seededRandom(c.chunkSeed))
  const settled = async (): Promise<void> => { await logs.get(id)?.done }
  if (c.transport === 'h2') return await h2Send(ports.h2, { ':method': 'POST', ':path': '/upload', ...headers }, chunks, settled)
  const head = ['POST /upload HTTP/1.1', 'Host: localhost', ...Object.entries(headers).map(([name, value]) => `${name}: ${value}`)]
  if (c.transport === 'h1 length') return await h1Request(ports.h1, [...head, `Content-Length: ${data.body.length}`], chunks, settled)
  const framed = chunks.map((chunk) => Buffer.concat([Buffer.from(`${chunk.length.toString(16)}\r\n`), chunk, Buffer.from('\r\n')]))
  return await h1Request(ports.h1, [...head, 'Transfer-Encoding: chunked'], [...framed, Buffer.from('0\r\n\r\n')], settled)
}

/** Why a case's outcome breaks the guarantee, or null when it holds. */
function check (c: Case, id: string, response: RawResponse, log: Log | undefined): string | null {
  const threw = c.when === 'throw'
  if (c.digest === 'wrong') {
    // A throw answered before the verdict is the application's own 500.
    if (!(threw && response.status === 500)) {
      if (response.status !== 400) return `status ${response.status} for a wrong digest: ${response.body}`
      if (!String(response.headers['content-type']).startsWith('application/problem+json') ||
        (JSON.parse(response.body) as { type?: string }).type !== problemTypes + 'digest-mismatching-value') {
        return `not the mismatch problem: ${response.headers['content-type']} ${response.body}`
      }
    }
  } else {
    const expected = threw ? 500 : 200
    if (response.status !== expected) return `status ${response.status}, expected ${expected}: ${response.body}`
    if (!threw && response.body !== JSON.stringify(c.when === 'early' ? { early: true } : { late: true })) return `body ${response.body}`
  }
  if (log === undefined) return c.digest === 'wrong' ? null : 'the handler never ran'
  const stalled = [...log.readers.map(({ error }) => error), log.commitError].find((error) => error?.code === 'FST_DIGEST_FIELDS_CLIENT_STALLED')
  if (stalled !== undefined) return 'a client that sent everything was ended as stalled'
  for (const reader of log.readers) {
    if (reader.got > (reader.expected ?? Number.POSITIVE_INFINITY)) return `${reader.what} got ${reader.got} bytes of ${reader.expected}`
    if (reader.expected !== null && reader.ended && reader.error === null) {
      if (reader.got !== reader.expected) return `${reader.what} ended after ${reader.got} bytes of ${reader.expected}, without an error`
      if (c.digest === 'wrong' && reader.last) return `${reader.what} saw the end of content whose digest failed`
    }
    // Content that verified reaches a reader that reads it all, also one reading on after an early
    // reply: it pipes, or reads a stream @fastify/multipart pipes (a late reader's error was its 500).
    if (c.digest !== 'wrong' && !threw && reader.expected !== null && reader.error !== null) {
      return `${reader.what} got ${reader.error.code ?? reader.error.message} after ${reader.got} of ${reader.expected} bytes of content that verified`
    }
  }
  const present = readdirSync(folder).filter((name) => name.startsWith(`${id}-`) || name.startsWith(`.${id}-`)).sort()
  if (!log.committed) return present.length > 0 ? `files left without a commit: ${present.join(', ')}` : null
  if (c.digest === 'wrong') return 'files committed from content whose digest failed'
  const names = log.saved.map(({ destination }) => destination.slice(folder.length + 1)).sort()
  if (present.join() !== names.join()) return `after the commit: ${present.join(', ')}; saved: ${names.join(', ')}`
  for (const { destination, data } of log.saved) {
    if (!readFileSync(destination).equals(data)) return `${destination} does not hold the bytes sent`
  }
  return null
}

const size = fc.oneof(
  { weight: 3, arbitrary: fc.integer({ min: 0, max: 2048 }) },
  { weight: 3, arbitrary: fc.integer({ min: 2049, max: 256 * 1024 }) },
  { weight: 3, arbitrary: fc.integer({ min: 256 * 1024 + 1, max: 600 * 1024 }) }
)

const cases: fc.Arbitrary<Case> = fc.record({
  kind: fc.constantFrom<Case['kind']>('raw', 'raw', 'multipart'),
  sizes: fc.array(size, { minLength: 1, maxLength: 4 }),
  field: fc.option(fc.nat(4), { freq: 3 }),
  digest: fc.constantFrom<Digest>('right', 'wrong', 'none'),
  transport: fc.constantFrom<Transport>('h1 length', 'h1 chunked', 'h2'),
  shape: fc.constantFrom<Shape>(...rawShapes, ...multipartShapes),
  when: fc.constantFrom<When>('early', 'late', 'throw'),
  some: fc.nat(3),
  pieces: fc.integer({ min: 1, max: 60 }),
  offset: fc.nat(),
  chunkSeed: fc.nat()
}).map((c) => {
  // Multipart shapes read multipart bodies; the raw ones read either kind.
  const kind = (multipartShapes as readonly Shape[]).includes(c.shape) ? 'multipart' : c.kind
  return { ...c, kind, sizes: kind === 'raw' ? c.sizes.slice(0, 1) : c.sizes, field: kind === 'raw' ? null : c.field }
})

t.test('every handler shape, reply timing, upload and transport is answered as modelled, and no reader is short-changed', async (t) => {
  const escaped = watchProcess(t)
  const ports = { h1: await server(false), h2: await server(true) }
  t.teardown(() => { for (const connection of open) connection.destroy() })
  const outcomes = new Map<string, number>()
  const count = (key: string): void => { outcomes.set(key, (outcomes.get(key) ?? 0) + 1) }
  let next = 0
  await fc.assert(fc.asyncProperty(cases, async (c) => {
    const id = String(++next)
    const data = upload(c)
    uploads.set(id, data)
    try {
      const response = await send(ports, c, id, data)
      const log = logs.get(id)
      count(`${c.digest} ${c.when} ${response.status}`)
      for (const error of [...log?.readers.map((reader) => reader.error) ?? [], log?.commitError]) {
        if (error != null) count(`error ${error.code ?? error.message}`)
      }
      if (log?.committed === true) count('committed')
      const failure = check(c, id, response, log)
      if (failure !== null) throw new Error(failure)
    } finally {
      uploads.delete(id)
      logs.delete(id)
    }
  }), { numRuns: Math.round(200 * fuzzScale), seed: fuzzSeed, timeout: 10_000 })
  t.same(escaped, [], 'nothing escaped to the process')
  t.comment(`outcomes: ${JSON.stringify(Object.fromEntries([...outcomes].sort()))}`)
})
