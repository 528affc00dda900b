/** Digests on responses: Want-* fields answered, in the header section or, for streams, the trailer section. */
import type { FastifyReply, FastifyRequest, onSendHookHandler } from 'fastify'
import type { Hash } from 'node:crypto'
import { pipeline, Transform, type Readable } from 'node:stream'
import { parseDictionary, serializeByteSequence, type Dictionary } from 'structured-headers'
import type { DigestAlgorithm } from './types.js'
import type { Algorithm } from './algorithms.js'
import type { Settings } from './options.js'
import { kSuppliedDigests } from './symbols.js'

export type SuppliedDigests = Readonly<Partial<Record<DigestAlgorithm, Buffer>>>
type DigestReply = FastifyReply & { [kSuppliedDigests]?: SuppliedDigests | null }

/**
 * The preferences a Want-* field states, or null when there is none. The field was judged when the
 * request arrived, unless something answered before the plugin's onRequest hook ran: one that does
 * not parse then asks for nothing.
 */
function preferencesOf (want: string | string[] | undefined): Dictionary | null {
  if (want === undefined) return null
  try {
    return parseDictionary(String(want))
  } catch {
    return null
  }
}

/**
 * The algorithm a response field is sent with when a request asks for it (RFC 9530 section 4):
 * among those `offered`, the one the client weighs highest, ties going to the route's own
 * preference; none when every offered key is at 0 or absent.
 */
function chosen (settings: Settings, weights: Dictionary, offered: (algorithm: Algorithm) => boolean):
Algorithm | null {
  let best: Algorithm | null = null
  let bestWeight = 0
  for (const [key, algorithm] of settings.algorithms) {
    const weight = weights.get(key)?.[0]
    if (typeof weight === 'number' && weight > bestWeight && offered(algorithm)) {
      best = algorithm
      bestWeight = weight
    }
  }
  return best
}

function field (algorithm: Algorithm, digest: Buffer): string {
  return `${algorithm.key}=${serializeByteSequence(digest)}`
}

function addVary (reply: FastifyReply, fields: string): void {
  const vary = reply.getHeader('vary')
  reply.header('vary', vary === undefined ? fields : `${String(vary)}, ${fields}`)
}

type SentField = 'content-digest' | 'repr-digest'

interface Coverage { content: boolean, repr: 'payload' | 'supplied' | 'none' }

/**
 * What a response carries (RFC 9530 sections 2 and 3): Content-Digest covers the content sent,
 * Repr-Digest the whole selected representation. For a full 2xx response they are the same bytes;
 * for HEAD there is no content, and the representation is the payload a GET would send; for a 206
 * the part is not the representation, and for a 304 there is none here, so Repr-Digest is sent
 * only as the application supplied it; a 204 has no representation data, whose digest is that of
 * empty content.
 */
function coverage (request: FastifyRequest, status: number): Coverage {
  if (status === 304) return { content: false, repr: 'supplied' }
  // Fastify drops a 204's payload, whatever it was: the digests are those of empty content.
  if (status === 204) return { content: true, repr: 'payload' }
  if (status < 200 || status >= 300) return { content: false, repr: 'none' }
  if (status === 206) return { content: true, repr: 'supplied' }
  return { content: request.method !== 'HEAD', repr: 'payload' }
}

/**
 * An onSend hook, the last of the route, that answers Want-Content-Digest and Want-Repr-Digest,
 * and sends the route's unsolicited digests. A string or Buffer payload is hashed at once and the
 * fields go in the header section; a stream is hashed as it is sent and the fields go in the
 * trailer section (Fastify's reply.trailer), never buffered.
 */
export function responseDigests (settings: Settings): onSendHookHandler {
  const unsolicitedContent = settings.responseDigests.includes('content-digest')
  const unsolicitedRepr = settings.responseDigests.includes('repr-digest')
  const preferred = settings.algorithms.values().next().value as Algorithm

  return function sendDigests (request, reply: DigestReply, payload, done) {
    const wantContentField = request.headers['want-content-digest']
    const wantReprField = request.headers['want-repr-digest']
    // A content coding added after the handler (@fastify/compress) changes the representation
    // the application knew the digest of (RFC 9530 section 3): it is hashed instead.
    const encoding = reply.getHeader('content-encoding')
    const supplied = encoding === undefined || encoding === 'identity' ? reply[kSuppliedDigests] ?? null : null
    if (wantContentField === undefined && wantReprField === undefined && !unsolicitedContent && !unsolicitedRepr) {
      done(null, payload)
      return
    }
    const covers = coverage(request, reply.statusCode)
    // Problems and redirects carry no digest, and do not vary for one.
    if (!covers.content && covers.repr === 'none') {
      done(null, payload)
      return
    }
    // A response that depends on the preference fields says so to caches (RFC 9110 section 12.5.5).
    if (wantContentField !== undefined || wantReprField !== undefined) {
      const varies = [wantContentField === undefined ? [] : 'Want-Content-Digest']
      if (wantReprField !== undefined) varies.push('Want-Repr-Digest')
      addVary(reply, varies.flat().join(', '))
    }
    const wantContent = preferencesOf(wantContentField)
    const wantRepr = preferencesOf(wantReprField)
    const isSupplied = (algorithm: Algorithm): boolean => supplied?.[algorithm.key] !== undefined
    const contentAlgorithm = !covers.content
      ? null
      : wantContent !== null ? chosen(settings, wantContent, () => true) : unsolicitedContent ? preferred : null
    // A digest the application supplied wins whenever the client accepts its algorithm, so that a
    // stored checksum is sent instead of hashing the representation again.
    const reprOffered = covers.repr === 'payload' ? () => true : isSupplied
    let reprAlgorithm: Algorithm | null = null
    if (covers.repr !== 'none') {
      if (wantRepr !== null) {
        reprAlgorithm = chosen(settings, wantRepr, isSupplied) ?? chosen(settings, wantRepr, reprOffered)
      } else if (unsolicitedRepr) {
        const known = [...settings.algorithms.values()].find(isSupplied)
        reprAlgorithm = known ?? (reprOffered(preferred) ? preferred : null)
      }
    }
    const reprValue = reprAlgorithm !== null && isSupplied(reprAlgorithm)
      ? supplied?.[reprAlgorithm.key] as Buffer
      : null
    if (reprValue !== null) reply.header('repr-digest', field(reprAlgorithm as Algorithm, reprValue))
    const toHash: Array<[SentField, Algorithm]> = []
    if (contentAlgorithm !== null) toHash.push(['content-digest', contentAlgorithm])
    if (reprAlgorithm !== null && reprValue === null) toHash.push(['repr-digest', reprAlgorithm])
    if (toHash.length === 0) {
      done(null, payload)
      return
    }
    const content = reply.statusCode === 204 ? '' : payload ?? ''
    if (typeof (content as Readable).pipe === 'function') {
      // A HEAD response sends no content, and its stream is not read: nothing to hash. An HTTP/1.0
      // recipient cannot take a trailer section: chunked framing is HTTP/1.1 (RFC 9112 section 6.1).
      if (request.method === 'HEAD' || (request.raw.httpVersionMajor === 1 && request.raw.httpVersionMinor === 0)) {
        done(null, payload)
        return
      }
      done(null, hashWhileSending(reply, payload as Readable, toHash))
      return
    }
    // A web stream or a Response is sent as Fastify reads it, beyond this hook's reach: no digest.
    if (typeof content === 'string' || Buffer.isBuffer(content)) {
      for (const [name, algorithm] of toHash) reply.header(name, field(algorithm, algorithm.digest(content)))
    }
    done(null, payload)
  }
}

/** Passes a streamed payload on while hashing it, and sends its digests in the trailer section. */
function hashWhileSending (reply: FastifyReply, payload: Readable, fields: ReadonlyArray<[SentField, Algorithm]>):
Readable {
  const algorithms = [...new Set(fields.map(([, algorithm]) => algorithm))]
  const hashes: Hash[] = algorithms.map((algorithm) => algorithm.createHash())
  let digests: Buffer[] | null = null
  const hashing = new Transform({
    transform (chunk: Buffer, _encoding, callback) {
      for (const hash of hashes) hash.update(chunk)
      callback(null, chunk)
    }
  })
  // Errors reach Fastify through the stream it sends; this callback only ends the pipeline.
  pipeline(payload, hashing, () => {})
  // Trailers and Content-Length do not go together (RFC 9112 section 6.1).
  reply.removeHeader('content-length')
  for (const [name, algorithm] of fields) {
    reply.trailer(name, (_reply, _payload, callback) => {
      digests ??= hashes.map((hash) => hash.digest())
      callback(null, field(algorithm, digests[algorithms.indexOf(algorithm)] as Buffer))
    })
  }
  return hashing
}
