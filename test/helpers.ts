import { spawn, type ChildProcess } from 'node:child_process'
import { createHash } from 'node:crypto'
import { once } from 'node:events'
import { readFileSync, watch } from 'node:fs'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { connect as h2connect, constants as h2, type OutgoingHttpHeaders } from 'node:http2'
import { connect } from 'node:net'
import type { AddressInfo } from 'node:net'
import type t from 'tap'
import Fastify, { type FastifyInstance, type FastifyServerOptions } from 'fastify'
import fastifyDigestFields, { type FastifyDigestFieldsOptions } from '../lib/index.js'

/** The test object tap hands to a subtest. */
export type Tap = Parameters<Parameters<typeof t.test>[0]>[0]

/** DIGEST_FUZZ_SCALE multiplies generated cases, uploads and load requests (default 1). */
export const fuzzScale = Number(process.env.DIGEST_FUZZ_SCALE ?? 1)

/**
 * The seed of every random generator in the suite: DIGEST_FUZZ_SEED replays a run, and each test
 * file prints the one it used.
 */
export const fuzzSeed = Number(process.env.DIGEST_FUZZ_SEED ?? Math.floor(Math.random() * 2 ** 31))

/** A seeded generator of numbers in [0, 1) (mulberry32), for fast-check and hand-made randomness alike. */
export function seededRandom (seed: number = fuzzSeed): () => number {
  let state = seed >>> 0
  return () => {
    state = (state + 0x6d2b79f5) >>> 0
    let x = state
    x = Math.imul(x ^ (x >>> 15), x | 1)
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61)
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296
  }
}

export const json = { 'content-type': 'application/json' }

export const problemTypes = 'https://iana.org/assignments/http-problem-types#'

// RFC 9530 appendix B examples: the 18 bytes {"hello": "world"} without a trailing newline.
export const hello = '{"hello": "world"}'
export const helloSha256 = 'sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:'
export const helloSha512 = 'sha-512=:WZDPaVn/7XgHaAy8pmojAkGWoRx2UFChF41A2svX+TaPm+AbwAgBWnrIiYllu7BNNyealdVLvRwEmTHWXvJwew==:'

/** The base64 digest of data, as openssl dgst -binary | base64 prints it. */
export function base64Digest (algorithm: 'sha-256' | 'sha-512' | 'md5' | 'sha', data: string | Buffer): string {
  const name = { 'sha-256': 'sha256', 'sha-512': 'sha512', md5: 'md5', sha: 'sha1' }[algorithm]
  return createHash(name).update(data).digest('base64')
}

/** A dictionary member `key=:base64:` for data. */
export function member (algorithm: 'sha-256' | 'sha-512' | 'md5' | 'sha', data: string | Buffer): string {
  return `${algorithm}=:${base64Digest(algorithm, data)}:`
}

export interface Calls { handler: number }

/**
 * An app with the plugin and a JSON echo route at POST /, counting handler calls so that tests can
 * assert no handler ran on content that failed.
 */
export async function buildApp (
  options: FastifyDigestFieldsOptions = {},
  serverOptions: FastifyServerOptions = {}
): Promise<{ app: FastifyInstance, calls: Calls }> {
  const app = Fastify(serverOptions)
  const calls = { handler: 0 }
  await app.register(fastifyDigestFields, options)
  app.post('/', async (request) => {
    calls.handler++
    return { body: request.body, digest: describeDigest(request.digest) }
  })
  return { app, calls }
}

/** request.digest as JSON: field names and base64 values. */
export function describeDigest (digest: import('../lib/index.js').VerifiedDigest | null): unknown {
  if (digest === null) return null
  return {
    fields: digest.fields,
    values: Object.fromEntries(Object.entries(digest.values).map(([key, value]) => [key, value.toString('base64')]))
  }
}

/** Records process-level failures (uncaught exceptions, unhandled rejections) for the length of a test. */
export function watchProcess (t: Tap): unknown[] {
  const escaped: unknown[] = []
  const record = (error: unknown): void => { escaped.push(error) }
  process.on('unhandledRejection', record)
  process.on('uncaughtExceptionMonitor', record)
  t.teardown(() => {
    process.off('unhandledRejection', record)
    process.off('uncaughtExceptionMonitor', record)
  })
  return escaped
}

/**
 * Sends an HTTP/2 request with its content in the DATA frames given (each written in its own event
 * loop turn; none for an empty list, whose HEADERS frame then ends the stream) and reads the whole
 * response.
 */
export async function h2Request (port: number, headers: OutgoingHttpHeaders, chunks: Buffer[] = []): Promise<RawResponse> {
  const session = h2connect(`http://127.0.0.1:${port}`)
  session.on('error', () => {})
  try {
    const stream = session.request(headers, { endStream: chunks.length === 0 })
    stream.on('error', () => {})
    const received: Buffer[] = []
    stream.on('data', (chunk: Buffer) => received.push(chunk))
    const response = new Promise<Record<string, string>>((resolve) => stream.once('response', (h) => resolve(h as Record<string, string>)))
    const closed = new Promise((resolve) => stream.once('close', resolve))
    for (const [i, chunk] of chunks.entries()) {
      if (stream.destroyed) break
      if (i === chunks.length - 1) stream.end(chunk)
      else stream.write(chunk)
      await new Promise((resolve) => setImmediate(resolve))
    }
    await closed
    const responseHeaders = await response
    return { status: Number(responseHeaders[':status']), headers: responseHeaders, body: Buffer.concat(received).toString('utf8') }
  } finally {
    session.close()
  }
}

export async function listen (app: { listen: FastifyInstance['listen'], server: { address: () => unknown } }): Promise<number> {
  await app.listen({ host: '127.0.0.1', port: 0 })
  return (app.server.address() as AddressInfo).port
}

export interface RawResponse {
  status: number
  headers: Record<string, string>
  body: string
}

/**
 * Sends a request over a real socket exactly as given: the head as written (so a field can be split
 * over several lines) and the body in the chunks given, each written in its own event loop turn, or
 * `pause` milliseconds apart.
 */
export async function rawRequest (port: number, head: string[], chunks: Buffer[] = [], pause = 0): Promise<RawResponse> {
  const socket = connect({ host: '127.0.0.1', port })
  socket.setNoDelay(true)
  const received: Buffer[] = []
  socket.on('data', (data) => received.push(data))
  // A server that answers early (413) and closes may reset the rest of the upload: what it sent
  // before still counts.
  socket.on('error', () => {})
  const closed = new Promise<void>((resolve) => socket.on('close', () => resolve()))
  await new Promise<void>((resolve) => socket.once('connect', resolve))
  socket.write([...head, 'Connection: close', '', ''].join('\r\n'))
  for (const chunk of chunks) {
    // Once the server has answered, a client stops sending.
    if (socket.destroyed || received.length > 0) break
    socket.write(chunk)
    await new Promise((resolve) => pause > 0 ? setTimeout(resolve, pause) : setImmediate(resolve))
  }
  await closed
  return parseResponse(Buffer.concat(received).toString('latin1'))
}

function parseResponse (text: string): RawResponse {
  const end = text.indexOf('\r\n\r\n')
  const [statusLine = '', ...lines] = text.slice(0, end).split('\r\n')
  const headers: Record<string, string> = {}
  for (const line of lines) {
    const colon = line.indexOf(':')
    headers[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim()
  }
  let body = text.slice(end + 4)
  if (headers['transfer-encoding'] === 'chunked') {
    let decoded = ''
    for (let at = 0; ;) {
      const lineEnd = body.indexOf('\r\n', at)
      const size = parseInt(body.slice(at, lineEnd), 16)
      if (!(size > 0)) break
      decoded += body.slice(lineEnd + 2, lineEnd + 2 + size)
      at = lineEnd + 2 + size + 2
    }
    body = decoded
  }
  return { status: Number(statusLine.split(' ')[1]), headers, body: Buffer.from(body, 'latin1').toString('utf8') }
}

/** Deterministic bytes from a seed (xorshift32), so that a failing case can be replayed. */
export function seededBytes (size: number, seed: number): Buffer {
  const data = Buffer.allocUnsafe(size)
  let x = seed | 1
  for (let i = 0; i < size; i++) {
    x ^= x << 13
    x ^= x >>> 17
    x ^= x << 5
    data[i] = x & 0xff
  }
  return data
}

/** Splits data into chunks of random sizes between 1 and max bytes, drawn from `random`. */
export function randomChunks (data: Buffer, max: number, random: () => number): Buffer[] {
  const chunks: Buffer[] = []
  for (let at = 0; at < data.length;) {
    const size = 1 + Math.floor(random() * max)
    chunks.push(data.subarray(at, at + size))
    at += size
  }
  return chunks
}

/**
 * Sends the head of a PUT and the bytes given, then gives up: an HTTP/2 stream cancelled, or an
 * HTTP/1.1 connection destroyed, in the next event loop turn.
 */
export async function abortUpload (port: number, http2: boolean, path: string, headers: Record<string, string>, sent: Buffer): Promise<void> {
  if (http2) {
    const session = h2connect(`http://127.0.0.1:${port}`)
    session.on('error', () => {})
    const stream = session.request({ ':method': 'PUT', ':path': path, ...headers })
    stream.on('error', () => {})
    stream.write(sent)
    await new Promise((resolve) => setImmediate(resolve))
    stream.close(h2.NGHTTP2_CANCEL)
    session.destroy()
    return
  }
  const socket = connect({ host: '127.0.0.1', port })
  socket.on('error', () => {})
  await once(socket, 'connect')
  socket.write([`PUT ${path} HTTP/1.1`, 'Host: localhost', ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`), '', ''].join('\r\n'))
  socket.write(sent)
  await new Promise((resolve) => setImmediate(resolve))
  socket.destroy()
}

/** Listens on a free port of 127.0.0.1 until the test ends; resolves with the server's origin. */
export async function serving (t: Tap, server: import('node:net').Server, scheme = 'http'): Promise<string> {
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => { server.close() })
  return `${scheme}://127.0.0.1:${(server.address() as AddressInfo).port}`
}

/**
 * The plugin loaded afresh with its file digests counting the files they open (to hash them), for
 * tests of how often a file is hashed.
 */
export async function pluginCountingOpens (t: Tap): Promise<{ opened: string[], plugin: typeof import('../lib/index.js') }> {
  const real = await import('node:fs/promises')
  const opened: string[] = []
  const counted = await t.mockImport<typeof import('../lib/response/file-digests.js')>('../lib/response/file-digests.js', {
    'node:fs/promises': { ...real, open: async (...args: Parameters<typeof real.open>) => { opened.push(String(args[0])); return await real.open(...args) } }
  })
  const plugin = await t.mockImport<typeof import('../lib/index.js')>('../lib/index.js', { '../lib/response/file-digests.js': counted })
  return { opened, plugin }
}

/** Resolves once `holds()` is true, looked at whenever `path` (a file or folder) changes. */
export async function whenChanged (path: string, holds: () => boolean): Promise<void> {
  await new Promise<void>((resolve) => {
    const check = (): void => {
      if (!holds()) return
      watcher.close()
      resolve()
    }
    // Looked at once the watch is on (fs.watch starts at once, the promise API's only when first
    // read), so that no change between the two is missed.
    const watcher = watch(path, check)
    check()
  })
}

/**
 * Resolves once the example resumable server's lock of upload `id` (UPLOAD_DIR/.locks/<id>.lock) is
 * held by process `pid`, or by none if null.
 */
export async function lockHeld (uploadDir: string, id: string, pid: number | null): Promise<void> {
  const path = join(uploadDir, '.locks', `${id}.lock`)
  const holder = (): number | null => {
    try {
      return (JSON.parse(readFileSync(path, 'utf8')) as { pid: number }).pid
    } catch {
      return null
    }
  }
  await whenChanged(join(uploadDir, '.locks'), () => holder() === pid)
}

/** A connection to write a request on by hand; `answered` resolves with the status of its first answer, or `closed`. */
export async function rawConnection (port: number): Promise<{ socket: import('node:net').Socket, answered: Promise<string> }> {
  const socket = connect({ host: '127.0.0.1', port })
  socket.on('error', () => {})
  await once(socket, 'connect')
  const answered = new Promise<string>((resolve) => {
    socket.once('data', (data: Buffer) => { resolve(data.toString('latin1').split(' ')[1] as string) })
    socket.once('close', () => { resolve('closed') })
  })
  return { socket, answered }
}

export interface ServerProcess { origin: string, port: number, child: ChildProcess }

/**
 * Runs a server as its own process (`args` to Node, with PORT=0 and `env`) until the test ends;
 * resolves once it logs the origin it listens on. Its output keeps flowing, so that a full pipe
 * never holds it.
 */
export async function serverProcess (t: Tap, args: string[], env: Record<string, string> = {}, cwd = process.cwd()): Promise<ServerProcess> {
  const child = spawn(process.execPath, args, { cwd, env: { ...process.env, PORT: '0', ...env }, stdio: ['ignore', 'pipe', 'inherit'] })
  t.teardown(async () => { await stopProcess(child) })
  for await (const line of createInterface({ input: child.stdout as NodeJS.ReadableStream })) {
    const match = /(http:\/\/127\.0\.0\.1:(\d+))/.exec(line)
    if (match === null) continue
    child.stdout?.resume()
    return { origin: match[1] as string, port: Number(match[2]), child }
  }
  throw new Error(`${args.join(' ')} ended before it listened`)
}

/** Kills a server process as a crash would (SIGKILL), and waits until it is gone. */
export async function stopProcess (child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return
  const exited = once(child, 'exit')
  child.kill('SIGKILL')
  await exited
}

/**
 * Resolves once the connection has pushed into a request stream what `enough` asks for (the bytes
 * pushed, and whether the end was), reading nothing: for a hook that waits before the plugin's.
 */
export async function whenPushed (raw: import('node:stream').Readable, enough: (bytes: number, ended: boolean) => boolean): Promise<void> {
  const state = (raw as unknown as { _readableState: { length: number, ended: boolean } })._readableState
  if (enough(state.length, state.ended)) return
  const push = raw.push
  await new Promise<void>((resolve) => {
    raw.push = function (chunk: Buffer | null) {
      const more = push.call(this, chunk)
      if (enough(state.length, state.ended)) {
        raw.push = push
        resolve()
      }
      return more
    }
  })
}
