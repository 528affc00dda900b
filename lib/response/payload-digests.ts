/** The digests of a response's payload: known before it is sent, or found as it is sent for the trailer section. */
import type { FastifyRequest } from 'fastify'
import { pipeline, Transform, type Readable } from 'node:stream'
import type { Algorithm } from '../fields/algorithms.js'
import type { FileDigests, FileDigestsFound, FileRef } from './file-digests.js'
import { digestsOf } from '../fields/unencoded.js'

export type Values = ReadonlyMap<Algorithm, Buffer>

function fileChanged (): Error {
  return new Error('fastify-digest-fields: the file changed while it was sent, so the response is cut short')
}

/** Digests known before the content is sent (header section), or once it has been (trailer section). */
export type Digests =
  | { readonly now: Values }
  | { readonly later: () => Values | null, readonly payload: Readable }
  | null

/**
 * Whether content that is not known yet can be hashed as it is sent, for the trailer section:
 * a HEAD response's stream is not read, and an HTTP/1.0 recipient cannot take a trailer
 * section, since chunked framing is HTTP/1.1 (RFC 9112 section 6.1).
 */
export function canTrail (request: FastifyRequest): boolean {
  return request.method !== 'HEAD' && !(request.raw.httpVersionMajor === 1 && request.raw.httpVersionMinor === 0)
}

/**
 * The digests of what a payload holds with `codings` removed: at once for a string or Buffer,
 * from the file cache for a file (hashing it first when it is small or `mustHash`), otherwise as
 * a stream is sent, when it can be.
 */
export async function digestsOfPayload (payload: unknown, codings: readonly string[], algorithms: readonly Algorithm[],
  file: FileRef | null, files: FileDigests, mustHash: boolean, trails: boolean): Promise<Digests> {
  if (typeof payload === 'string' || Buffer.isBuffer(payload)) {
    if (codings.length === 0) {
      return { now: new Map(algorithms.map((algorithm) => [algorithm, algorithm.digest(payload)])) }
    }
    const digests = digestsOf(codings, algorithms)
    digests.write(Buffer.from(payload))
    const values = await new Promise<Values | null>((resolve) => digests.end(resolve))
    return values === null ? null : { now: values }
  }
  const known = file === null ? null : await files.digests(file, algorithms, codings, mustHash)
  if (known?.values != null) return { now: known.values }
  if (!trails || typeof (payload as Readable | null)?.pipe !== 'function') return null
  return hashWhileSending(payload as Readable, codings, algorithms, known?.settle ?? null)
}

/**
 * Passes a streamed payload on while hashing it (its codings removed on the side, and waited for
 * rather than queued), never buffering it; the digests are there once it has ended. A file that
 * was not sent as the version it was (cut short or changed while it was read) fails the stream,
 * so that the response does not end as complete, with digests of bytes that are no version.
 */
function hashWhileSending (payload: Readable, codings: readonly string[], algorithms: readonly Algorithm[],
  settle: FileDigestsFound['settle'] | null): Digests {
  const digests = digestsOf(codings, algorithms)
  let values: Values | null = null
  let sent = 0
  const hashing = new Transform({
    transform (chunk: Buffer, _encoding, callback) {
      sent += chunk.length
      digests.write(chunk)
      digests.whenDrained(() => callback(null, chunk))
    },
    flush (callback) {
      digests.end((result) => {
        values = result
        if (settle === null) return callback()
        settle(result, sent).then((whole) => callback(whole ? null : fileChanged()))
      })
    }
  })
  // Errors reach Fastify through the stream it sends; this callback only ends the pipeline.
  pipeline(payload, hashing, () => {})
  return { later: () => values, payload: hashing }
}
