/** A request as the interceptor sends it: its header fields by lower-case name, and its content's bytes when known. */
import { createReadStream, ReadStream } from 'node:fs'
import { stat } from 'node:fs/promises'
import type { Algorithm } from '../fields/algorithms.js'
import { undigestedBody } from '../errors.js'
import { untilAborted } from './relay.js'

/**
 * What the interceptor does with content past maxBufferedBody, which it cannot hash in memory:
 * send it without a digest, refuse it, or hash a body that can be read twice (a file stream not
 * read yet: its file; a Blob or FormData, read already) and refuse any other.
 */
export type LargeBody = 'send' | 'refuse' | 'hash-first'

/** Header fields by lower-case name, as the interceptor edits them. */
export type FieldMap = Record<string, string | string[]>

/**
 * undici's header forms (an object, a flat array of names and values, or an iterable of pairs; fetch
 * passes an object) as one object with lower-case names.
 */
export function fieldsOf (headers: unknown): FieldMap {
  const fields: FieldMap = {}
  const add = (name: unknown, value: unknown): void => {
    if (value === undefined || value === null) return
    const key = String(name).toLowerCase()
    const values = Array.isArray(value) ? value.map(String) : [String(value)]
    const prior = fields[key]
    fields[key] = prior === undefined ? (values.length === 1 ? values[0] as string : values) : [prior, values].flat()
  }
  if (headers === null || headers === undefined) return fields
  if (Array.isArray(headers) && !Array.isArray(headers[0])) {
    for (let i = 0; i < headers.length; i += 2) add(headers[i], headers[i + 1])
  } else if (typeof (headers as Iterable<unknown>)[Symbol.iterator] === 'function') {
    for (const [name, value] of headers as Iterable<[unknown, unknown]>) add(name, value)
  } else {
    for (const [name, value] of Object.entries(headers as object)) add(name, value)
  }
  return fields
}

/** A request's content: its bytes when they are known or were read once, and what to send. */
export interface Content {
  /** The bytes, when the content can be hashed before it is sent and sent again on a retry. */
  readonly bytes: Buffer | null
  /** What undici sends: the bytes, the original body, or a body that continues what was read. */
  readonly body: unknown
  /** The Content-Type a FormData body is sent with (its boundary), when the caller set none. */
  readonly contentType?: string | undefined
  /** The digest of content hashed before it is sent without being kept (a file), by its algorithm. */
  readonly digests?: ReadonlyMap<Algorithm, Buffer>
}

/**
 * A stream of a file's bytes that has read nothing yet, whose file can be read once more to hash
 * them: a regular file with a size (a pipe, a device or a /proc file does not read the same twice),
 * streamed as bytes, not decoded to text.
 */
async function unreadFile (body: unknown): Promise<ReadStream | null> {
  if (!(body instanceof ReadStream) || typeof body.path !== 'string' || body.readableDidRead || body.bytesRead !== 0 ||
    body.readableEncoding !== null) return null
  const stats = await stat(body.path).catch(() => null)
  return stats?.isFile() === true && stats.size > 0 ? body : null
}

async function digestOfFile (stream: ReadStream, algorithm: Algorithm, signal: AbortSignal): Promise<Buffer> {
  const { start, end } = stream as ReadStream & { start?: number, end?: number }
  const hash = algorithm.createHash()
  // The consumer's abort ends the read of a file of any size, and lets the body go.
  for await (const chunk of createReadStream(stream.path as string, { start, end, signal })) hash.update(chunk as Buffer)
  return hash.digest()
}

/** Content whose bytes are known without reading anything, or null when it has to be read. */
export function knownContent (body: unknown): Content | null {
  if (body === null || body === undefined) return { bytes: null, body }
  if (typeof body === 'string') {
    const bytes = Buffer.from(body)
    return { bytes, body: bytes }
  }
  // A copy, so that a retry sends what was sent first even if the caller reuses its buffer.
  if (ArrayBuffer.isView(body) || body instanceof ArrayBuffer) {
    const view = ArrayBuffer.isView(body)
      ? new Uint8Array(body.buffer, body.byteOffset, body.byteLength)
      : new Uint8Array(body)
    const bytes = Buffer.from(view)
    return { bytes, body: bytes }
  }
  return null
}

const isAsyncIterable = (body: unknown): body is AsyncIterable<unknown> =>
  typeof (body as AsyncIterable<unknown>)[Symbol.asyncIterator] === 'function'

const chunkOf = (chunk: unknown): Buffer => typeof chunk === 'string'
  ? Buffer.from(chunk)
  : Buffer.from((chunk as Uint8Array).buffer, (chunk as Uint8Array).byteOffset, (chunk as Uint8Array).byteLength)

/**
 * Reads content undici would stream (a Blob, FormData, or a stream or iterable, such as every body
 * fetch() sends) into memory, up to `limit` bytes, so that it can be hashed and sent again. Past
 * the limit it is sent as it comes, what was read first, without a digest (undici sends no request
 * trailer section, where a streamed body's digest would go), or as `large` says when `algorithm`
 * is to digest it.
 */
export async function readContent (body: unknown, limit: number, large: LargeBody, algorithm: Algorithm | null,
  signal: AbortSignal): Promise<Content> {
  // The algorithm content past the limit is hashed with, if it may not go without a digest.
  const hashing = large === 'send' ? null : algorithm
  const file = large === 'hash-first' ? await unreadFile(body) : null
  if (hashing !== null && file !== null) {
    const digest = await digestOfFile(file, hashing, signal).catch((error: unknown) => {
      file.destroy()
      throw signal.aborted ? signal.reason as Error : error
    })
    return { bytes: null, body, digests: new Map([[hashing, digest]]) }
  }
  // By their tag, as undici does: the FormData of the undici package is not Node's global one.
  const tag = (body as { [Symbol.toStringTag]?: unknown })[Symbol.toStringTag]
  if (tag === 'FormData' || tag === 'Blob' || tag === 'File') {
    // Each Response serializes its own realm's FormData: Node's, or the undici package's, loaded
    // only then, so that the client entry loads whichever undici the application has, or none.
    const Serializer = (body instanceof FormData || body instanceof Blob ? Response : (await import('undici')).Response) as
      unknown as new (body: unknown) => Response
    const response = new Serializer(body)
    const contentType = response.headers.get('content-type') ?? undefined
    // The FormData of another copy of undici is not one to this one's Response, which would make
    // it the text "[object FormData]": it goes as it is, for its own undici to send, undigested.
    if (tag === 'FormData' && !String(contentType).startsWith('multipart/form-data')) return { bytes: null, body }
    const bytes = Buffer.from(await response.arrayBuffer())
    if (bytes.length <= limit) return { bytes, body: bytes, contentType }
    if (hashing === null) return { bytes: null, body: bytes, contentType }
    if (large === 'refuse') throw undigestedBody(limit)
    return { bytes: null, body: bytes, contentType, digests: new Map([[hashing, hashing.digest(bytes)]]) }
  }
  const iterator = isAsyncIterable(body)
    ? body[Symbol.asyncIterator]()
    : (body as Iterable<unknown>)[Symbol.iterator]() as Iterator<unknown> | AsyncIterator<unknown>
  const read: Buffer[] = []
  let size = 0
  // The consumer's abort lets the body go: a stream destroyed, as undici destroys a body it was
  // sending (an iterator awaiting inside cannot be returned from); with no error, which a stream
  // nobody listens to yet would throw.
  const letGo = (): void => { (body as { destroy?: () => void }).destroy?.() }
  while (size <= limit) {
    const next = await untilAborted(signal, () => iterator.next(), letGo)
    if (next.done === true) {
      const bytes = Buffer.concat(read, size)
      return { bytes, body: bytes }
    }
    const chunk = chunkOf(next.value)
    read.push(chunk)
    size += chunk.length
  }
  if (hashing !== null) {
    // A stream read in part is let go (closed), not left open; not waited for, since fetch's body
    // settles its return only once the request does.
    Promise.resolve(iterator.return?.()).catch(() => {})
    throw undigestedBody(limit)
  }
  async function * continued (): AsyncGenerator<Buffer> {
    yield * read
    for (let next = await iterator.next(); next.done !== true; next = await iterator.next()) yield chunkOf(next.value)
  }
  return { bytes: null, body: continued() }
}
