/** Digests on responses: Want-* fields answered and unasked digests sent, in the header section wherever the bytes are known first. */
import type { FastifyReply, FastifyRequest, onSendHookHandler } from 'fastify'
import { ReadStream } from 'node:fs'
import { pipeline, Transform, type Readable } from 'node:stream'
import { parseDictionary, serializeByteSequence, type Dictionary } from 'structured-headers'
import type { DigestAlgorithm, ResponseDigestField } from './types.js'
import { distinct, type Algorithm } from './algorithms.js'
import type { FileDigests, FileRef } from './file-digests.js'
import type { Settings } from './options.js'
import { kFilePayload, kServedFile, kSuppliedDigests, kUnencodedDigest } from './symbols.js'
import { contentCodings, digestsOf } from './unencoded.js'

export type SuppliedDigests = Readonly<Partial<Record<DigestAlgorithm, Buffer>>>
type Values = ReadonlyMap<Algorithm, Buffer>

/** The file a reply serves, as staticFileDigests() marks it, with the fields it sends unasked. */
export interface ServedFile {
  readonly path: string
  readonly fields: readonly ResponseDigestField[]
}

/** Digests known before the content is sent (header section), or once it has been (trailer section). */
type Digests = { readonly now: Values } | { readonly later: () => Values | null, readonly payload: Readable } | null

interface Unencoded { readonly algorithm: Algorithm, readonly digests: Digests }

type DigestReply = FastifyReply & {
  [kSuppliedDigests]?: SuppliedDigests | null
  [kServedFile]?: ServedFile | null
  [kUnencodedDigest]?: Unencoded | null
  [kFilePayload]?: unknown
}

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

interface Coverage { content: boolean, repr: 'payload' | 'supplied' | 'none' }

/**
 * What a response carries (RFC 9530 sections 2 and 3): Content-Digest covers the content sent,
 * Repr-Digest and Unencoded-Digest the whole selected representation. For a full 2xx response
 * they are the same bytes; for HEAD there is no content, and the representation is the payload a
 * GET would send; for a 206 the part is not the representation, and for a 304 there is none here,
 * so the representation's digests come only from the application or the file; a 204 has no
 * representation data, whose digest is that of empty content.
 */
function coverage (request: FastifyRequest, status: number): Coverage {
  if (status === 304) return { content: false, repr: 'supplied' }
  // Fastify drops a 204's payload, whatever it was: the digests are those of empty content.
  if (status === 204) return { content: true, repr: 'payload' }
  if (status < 200 || status >= 300) return { content: false, repr: 'none' }
  if (status === 206) return { content: true, repr: 'supplied' }
  return { content: request.method !== 'HEAD', repr: 'payload' }
}

/** The content codings of a response, or null for one the plugin cannot remove. */
function codingsOfReply (reply: FastifyReply): string[] | null {
  const encoding = reply.getHeader('content-encoding')
  const codings = contentCodings(encoding === undefined ? undefined : String(encoding))
  return Array.isArray(codings) ? codings : null
}

/**
 * The file a response serves, as the route's first onSend hook saw it, and only while no later
 * hook (@fastify/compress) has replaced the payload: a stream reading one, or, for a HEAD or 304
 * answer that sends none, the file staticFileDigests() marked.
 */
function fileOf (reply: DigestReply, payload: unknown): FileRef | null {
  if (reply[kFilePayload] !== payload) return null
  if (payload instanceof ReadStream && typeof payload.path === 'string') return { path: payload.path, stream: payload }
  const served = reply[kServedFile]
  const sendsNone = reply.request.method === 'HEAD' || reply.statusCode === 304
  return served != null && sendsNone ? { path: served.path } : null
}

/**
 * Whether content that is not known yet can be hashed as it is sent, for the trailer section:
 * a HEAD response's stream is not read, and an HTTP/1.0 recipient cannot take a trailer
 * section, since chunked framing is HTTP/1.1 (RFC 9112 section 6.1).
 */
function canTrail (request: FastifyRequest): boolean {
  return request.method !== 'HEAD' && !(request.raw.httpVersionMajor === 1 && request.raw.httpVersionMinor === 0)
}

/**
 * The digests of what a payload holds with `codings` removed: at once for a string or Buffer,
 * from the file cache for a file (hashing it first when it is small or `mustHash`), otherwise as
 * a stream is sent, when it can be.
 */
async function digestsOfPayload (payload: unknown, codings: readonly string[], algorithms: readonly Algorithm[],
  file: FileRef | null, files: FileDigests, mustHash: boolean, trails: boolean): Promise<Digests> {
  if (typeof payload === 'string' || Buffer.isBuffer(payload)) {
    if (codings.length === 0) return { now: new Map(algorithms.map((algorithm) => [algorithm, algorithm.digest(payload)])) }
    const digests = digestsOf(codings, algorithms)
    digests.write(Buffer.from(payload))
    const values = await new Promise<Values | null>((resolve) => digests.end(resolve))
    return values === null ? null : { now: values }
  }
  const known = file === null ? null : await files.digests(file, algorithms, codings, mustHash)
  if (known?.values != null) return { now: known.values }
  if (!trails || typeof (payload as Readable | null)?.pipe !== 'function') return null
  return hashWhileSending(payload as Readable, codings, algorithms, known?.remember ?? null)
}

/**
 * Passes a streamed payload on while hashing it (its codings removed on the side, and waited for
 * rather than queued), never buffering it; the digests are there once it has ended.
 */
function hashWhileSending (payload: Readable, codings: readonly string[], algorithms: readonly Algorithm[],
  remember: ((values: Values) => void) | null): Digests {
  const digests = digestsOf(codings, algorithms)
  let values: Values | null = null
  const hashing = new Transform({
    transform (chunk: Buffer, _encoding, callback) {
      digests.write(chunk)
      digests.whenDrained(() => callback(null, chunk))
    },
    flush (callback) {
      digests.end((result) => {
        values = result
        if (result !== null) remember?.(result)
        callback()
      })
    }
  })
  // Errors reach Fastify through the stream it sends; this callback only ends the pipeline.
  pipeline(payload, hashing, () => {})
  return { later: () => values, payload: hashing }
}

/**
 * The algorithm of Unencoded-Digest for this response, chosen as for Repr-Digest: asked for with
 * Want-Unencoded-Digest, or sent unasked (`responseDigests`, `integritySignatures`, a served file),
 * a supplied digest winning whenever it is acceptable.
 */
function unencodedAlgorithm (settings: Settings, request: FastifyRequest, reply: DigestReply,
  isSupplied: (algorithm: Algorithm) => boolean): Algorithm | null {
  const want = preferencesOf(request.headers['want-unencoded-digest'])
  if (want !== null) return chosen(settings, want, isSupplied) ?? chosen(settings, want, () => true)
  const unasked = settings.signer !== null || settings.responseDigests.includes('unencoded-digest') ||
    reply[kServedFile]?.fields.includes('unencoded-digest') === true
  if (!unasked) return null
  return [...settings.algorithms.values()].find(isSupplied) ?? settings.algorithms.values().next().value as Algorithm
}

/**
 * An onSend hook, the first of the route's own, that finds the Unencoded-Digest of a response
 * before a content coding is added to it (@fastify/compress): of the payload with every coding it
 * already has removed (draft-ietf-httpbis-unencoded-digest, section 3).
 */
export function findUnencodedDigest (settings: Settings, files: FileDigests): onSendHookHandler {
  return function findUnencodedDigest (request, reply: DigestReply, payload, done) {
    if (payload instanceof ReadStream || reply[kServedFile] != null) reply[kFilePayload] = payload
    const covers = coverage(request, reply.statusCode)
    const codings = codingsOfReply(reply)
    // A supplied digest is of the representation as the handler sent it: unencoded if uncoded.
    const supplied = codings?.length === 0 ? reply[kSuppliedDigests] ?? null : null
    const algorithm = unencodedAlgorithm(settings, request, reply, (known) => supplied?.[known.key] !== undefined)
    if (algorithm === null || covers.repr === 'none' || codings === null) {
      done(null, payload)
      return
    }
    const value = supplied?.[algorithm.key]
    if (value !== undefined) {
      reply[kUnencodedDigest] = { algorithm, digests: { now: new Map([[algorithm, value]]) } }
      done(null, payload)
      return
    }
    const file = fileOf(reply, payload)
    const content = reply.statusCode === 204 ? '' : payload ?? ''
    // Without a payload that is the representation (206, 304) only the whole file gives its digest.
    const whole = covers.repr === 'payload'
    const source = whole ? content : null
    const target = whole || file === null ? file : { path: file.path }
    const mustHash = settings.signer !== null
    digestsOfPayload(source, codings, [algorithm], target, files, mustHash, canTrail(request)).then((digests) => {
      reply[kUnencodedDigest] = { algorithm, digests }
      done(null, digests !== null && 'payload' in digests ? digests.payload : payload)
    }, () => done(null, payload))
  }
}

type SentField = 'content-digest' | 'repr-digest'

/**
 * An onSend hook, the last of the route, that answers Want-Content-Digest and Want-Repr-Digest,
 * sends the route's unasked digests and the Unencoded-Digest found before coding, and signs it.
 * What is known before the content is sent goes in the header section, with Content-Length kept;
 * a stream is hashed as it is sent and its fields go in the trailer section (Fastify's
 * reply.trailer), never buffered.
 */
export function responseDigests (settings: Settings, files: FileDigests): onSendHookHandler {
  const unsolicitedContent = settings.responseDigests.includes('content-digest')
  const unsolicitedRepr = settings.responseDigests.includes('repr-digest')
  const preferred = settings.algorithms.values().next().value as Algorithm

  return function sendDigests (request, reply: DigestReply, payload, done) {
    const wantContentField = request.headers['want-content-digest']
    const wantReprField = request.headers['want-repr-digest']
    const wantUnencodedField = request.headers['want-unencoded-digest']
    const served = reply[kServedFile]
    const unencoded = reply[kUnencodedDigest]
    if (wantContentField === undefined && wantReprField === undefined && wantUnencodedField === undefined &&
      !unsolicitedContent && !unsolicitedRepr && served == null && unencoded == null) {
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
    const varies = [
      wantContentField === undefined ? [] : 'Want-Content-Digest',
      wantReprField === undefined ? [] : 'Want-Repr-Digest',
      wantUnencodedField === undefined ? [] : 'Want-Unencoded-Digest'
    ].flat()
    if (varies.length > 0) addVary(reply, varies.join(', '))
    // A content coding added after the handler (@fastify/compress) changes the representation
    // the application knew the digest of (RFC 9530 section 3): it is hashed instead.
    const codings = codingsOfReply(reply)
    const supplied = codings?.length === 0 ? reply[kSuppliedDigests] ?? null : null
    const isSupplied = (algorithm: Algorithm): boolean => supplied?.[algorithm.key] !== undefined
    const fields = new Set([...settings.responseDigests, ...(served?.fields ?? [])])
    const wantContent = preferencesOf(wantContentField)
    const wantRepr = preferencesOf(wantReprField)
    const contentAlgorithm = !covers.content
      ? null
      : wantContent !== null
        ? chosen(settings, wantContent, () => true)
        : fields.has('content-digest') ? preferred : null
    // A digest the application supplied wins whenever the client accepts its algorithm, so that a
    // stored checksum is sent instead of hashing the representation again.
    let reprAlgorithm: Algorithm | null = null
    if (covers.repr !== 'none') {
      if (wantRepr !== null) {
        reprAlgorithm = chosen(settings, wantRepr, isSupplied) ?? chosen(settings, wantRepr, () => true)
      } else if (fields.has('repr-digest')) {
        reprAlgorithm = [...settings.algorithms.values()].find(isSupplied) ?? preferred
      }
    }
    const reprValue = reprAlgorithm !== null && isSupplied(reprAlgorithm) ? supplied?.[reprAlgorithm.key] as Buffer : null
    if (reprValue !== null) reply.header('repr-digest', field(reprAlgorithm as Algorithm, reprValue))
    const sent = reprValue === null ? reprAlgorithm : null
    sendDigestsOf(request, reply, payload, { contentAlgorithm, reprAlgorithm: sent, covers, files, settings })
      .then((sending) => done(null, sending), () => done(null, payload))
  }
}

interface Sending {
  readonly contentAlgorithm: Algorithm | null
  readonly reprAlgorithm: Algorithm | null
  readonly covers: Coverage
  readonly files: FileDigests
  readonly settings: Settings
}

/** Finds the digests a response sends, puts each in the header or the trailer section, and signs. */
async function sendDigestsOf (request: FastifyRequest, reply: DigestReply, payload: unknown, plan: Sending):
Promise<unknown> {
  const { contentAlgorithm, reprAlgorithm, covers, files, settings } = plan
  const file = fileOf(reply, payload)
  const content = reply.statusCode === 204 ? '' : payload ?? ''
  const sent: Array<[SentField, Algorithm]> = []
  // The content sent, and the representation when the content is all of it, are the same bytes.
  if (contentAlgorithm !== null) sent.push(['content-digest', contentAlgorithm])
  if (reprAlgorithm !== null && covers.repr === 'payload') sent.push(['repr-digest', reprAlgorithm])
  let sending = payload
  const place = (digests: Digests, fields: ReadonlyArray<[SentField | 'unencoded-digest', Algorithm]>): void => {
    if (digests === null) return
    for (const [name, algorithm] of fields) {
      if ('now' in digests) {
        reply.header(name, field(algorithm, digests.now.get(algorithm) as Buffer))
        continue
      }
      // Trailers and Content-Length do not go together (RFC 9112 section 6.1).
      reply.removeHeader('content-length')
      reply.trailer(name, (_reply, _payload, callback) => {
        const values = digests.later()
        // Content that did not decode has no digest: Fastify leaves out a trailer that failed.
        if (values === null) callback(new Error(`${name}: the content did not decode`), '')
        else callback(null, field(algorithm, values.get(algorithm) as Buffer))
      })
    }
  }
  if (sent.length > 0) {
    const digests = await digestsOfPayload(content, [], distinct(sent.map(([, algorithm]) => algorithm)), file,
      files, false, canTrail(request))
    if (digests !== null && 'payload' in digests) sending = digests.payload
    place(digests, sent)
  }
  // A 206 or a 304 carries the digest of the whole representation, which only a file can give.
  if (reprAlgorithm !== null && covers.repr === 'supplied' && file !== null) {
    place(await digestsOfPayload(null, [], [reprAlgorithm], { path: file.path }, files, false, false),
      [['repr-digest', reprAlgorithm]])
  }
  const unencoded = reply[kUnencodedDigest]
  if (unencoded != null) {
    place(unencoded.digests, [['unencoded-digest', unencoded.algorithm]])
    // Chromium refuses every response whose signature fails, or that is signed without an
    // Unencoded-Digest in the header section: only a digest known now is signed.
    if (settings.signer !== null && unencoded.digests !== null && 'now' in unencoded.digests) {
      const signature = settings.signer.signatureOf(
        field(unencoded.algorithm, unencoded.digests.now.get(unencoded.algorithm) as Buffer))
      reply.header('signature-input', signature['signature-input'])
      reply.header('signature', signature.signature)
    }
  }
  return sending
}
