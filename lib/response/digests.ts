/** Digests on responses: Want-* fields answered and unasked digests sent, in the header section where known first. */
import type { FastifyRequest, onSendHookHandler } from 'fastify'
import { ReadStream } from 'node:fs'
import type { DigestAlgorithm } from '../types.js'
import { distinct, type Algorithm } from '../fields/algorithms.js'
import type { FileDigests } from './file-digests.js'
import type { Settings } from '../options/settings.js'
import { kFilePayload, kSentDigests, kServedFile, kSuppliedDigests, kUnencodedDigest } from '../symbols.js'
import { canTrail, digestsOfPayload, type Digests } from './payload-digests.js'
import { chosen, preferencesOf } from '../fields/preferences.js'
import { addVary, field, representationAlgorithm } from './fields.js'
import { codingsOfReply, coverage, fileOf, type Coverage, type FileReply } from './coverage.js'
import { uploadReprDigests } from '../uploads/resumable.js'

export type SuppliedDigests = Readonly<Partial<Record<DigestAlgorithm, Buffer>>>
interface Unencoded { readonly algorithm: Algorithm, readonly digests: Digests }

/** The fields a pass of the hook placed, to take back if the hooks run again for an error. */
interface SentDigests { readonly headers: string[], readonly trailers: string[] }

type DigestReply = FileReply & {
  [kSuppliedDigests]?: SuppliedDigests | null
  [kUnencodedDigest]?: Unencoded | null
  [kSentDigests]?: SentDigests | null
}

/**
 * An onSend hook, the first of the route's own, that finds the Unencoded-Digest of a response
 * before a content coding is added to it (@fastify/compress): of the payload with every coding it
 * already has removed (draft-ietf-httpbis-unencoded-digest, section 3).
 */
export function findUnencodedDigest (settings: Settings, files: FileDigests): onSendHookHandler {
  const unaskedOnRoute = settings.signer !== null || settings.responseDigests.includes('unencoded-digest')
  return function findUnencodedDigest (request, reply: DigestReply, payload, done) {
    // Hooks run again for the answer to an error: what an earlier payload found is not its.
    reply[kUnencodedDigest] = null
    const served = reply[kServedFile]
    if (payload instanceof ReadStream || served != null) reply[kFilePayload] = payload
    const wantField = request.headers['want-unencoded-digest']
    const unasked = unaskedOnRoute || served?.fields.includes('unencoded-digest') === true
    // Most responses are done with here, after three lookups.
    if (wantField === undefined && !unasked) {
      done(null, payload)
      return
    }
    const covers = coverage(request, reply.statusCode)
    const codings = codingsOfReply(reply)
    // A supplied digest is of the representation as the handler sent it: unencoded if uncoded.
    const supplied = codings?.length === 0 ? reply[kSuppliedDigests] ?? null : null
    const algorithm = representationAlgorithm(settings, preferencesOf(wantField), unasked,
      (known) => supplied?.[known.key] !== undefined)
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
    // A signature needs its digest first; a HEAD, which no browser checks, is not worth a hash.
    const mustHash = settings.signer !== null && request.method !== 'HEAD'
    digestsOfPayload(source, codings, [algorithm], target, files, mustHash, canTrail(request)).then((digests) => {
      reply[kUnencodedDigest] = { algorithm, digests }
      done(null, digests !== null && 'payload' in digests ? digests.payload : payload)
    }, () => done(null, payload))
  }
}

/** Two onSend hooks that never fail, as one. */
export function inSequence (first: onSendHookHandler, second: onSendHookHandler): onSendHookHandler {
  return function findAndSendDigests (request, reply, payload, done) {
    first.call(this, request, reply, payload, (_error?: unknown, found?: unknown) => { second.call(this, request, reply, found, done) })
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
    if (reply[kSentDigests] != null) withdrawDigests(reply)
    const wantContentField = request.headers['want-content-digest']
    const wantReprField = request.headers['want-repr-digest']
    const wantUnencodedField = request.headers['want-unencoded-digest']
    const served = reply[kServedFile]
    const unencoded = reply[kUnencodedDigest]
    const upload = uploadReprDigests(request, reply.statusCode, payload)
    if (wantContentField === undefined && wantReprField === undefined && wantUnencodedField === undefined &&
      !unsolicitedContent && !unsolicitedRepr && served == null && unencoded == null && upload === null) {
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
    const supplied = upload?.digests ?? (codings?.length === 0 ? reply[kSuppliedDigests] ?? null : null)
    const isSupplied = (algorithm: Algorithm): boolean => supplied?.[algorithm.key] !== undefined
    const fields = new Set([...settings.responseDigests, ...(served?.fields ?? [])])
    const wantContent = preferencesOf(wantContentField)
    const wantRepr = preferencesOf(wantReprField) ?? upload?.want ?? null
    const contentAlgorithm = !covers.content
      ? null
      : wantContent !== null
        ? chosen(settings.algorithms, wantContent, () => true)
        : fields.has('content-digest') ? preferred : null
    // Every response that gets here has a representation (those without one went above).
    // An upload's answer without content sends the upload's digest so far, or none.
    const reprAlgorithm = upload === null
      ? representationAlgorithm(settings, wantRepr, fields.has('repr-digest'), isSupplied)
      : wantRepr === null ? null : chosen(settings.algorithms, wantRepr, isSupplied)
    const reprSupplied = reprAlgorithm === null ? undefined : supplied?.[reprAlgorithm.key]
    sendDigestsOf(request, reply, payload, { contentAlgorithm, reprAlgorithm, reprSupplied, covers, files, settings })
      .then((sending) => done(null, sending), () => done(null, payload))
  }
}

interface Sending {
  readonly contentAlgorithm: Algorithm | null
  readonly reprAlgorithm: Algorithm | null
  /** The application's digest of the representation, with `reprAlgorithm`, sent as it is. */
  readonly reprSupplied: Buffer | undefined
  readonly covers: Coverage
  readonly files: FileDigests
  readonly settings: Settings
}

/** Finds the digests a response sends, puts each in the header or the trailer section, and signs. */
async function sendDigestsOf (request: FastifyRequest, reply: DigestReply, payload: unknown, plan: Sending):
Promise<unknown> {
  const { contentAlgorithm, reprSupplied, covers, files, settings } = plan
  const reprAlgorithm = reprSupplied === undefined ? plan.reprAlgorithm : null
  const file = fileOf(reply, payload)
  const content = reply.statusCode === 204 ? '' : payload ?? ''
  const sent: Array<[SentField, Algorithm]> = []
  // The content sent, and the representation when the content is all of it, are the same bytes.
  if (contentAlgorithm !== null) sent.push(['content-digest', contentAlgorithm])
  if (reprAlgorithm !== null && covers.repr === 'payload') sent.push(['repr-digest', reprAlgorithm])
  let sending = payload
  const placed: SentDigests = { headers: [], trailers: [] }
  reply[kSentDigests] = placed
  const place = (digests: Digests, fields: ReadonlyArray<[SentField | 'unencoded-digest', Algorithm]>): void => {
    if (digests === null) return
    for (const [name, algorithm] of fields) {
      if ('now' in digests) {
        reply.header(name, field(algorithm, digests.now.get(algorithm) as Buffer))
        placed.headers.push(name)
        continue
      }
      // Trailers and Content-Length do not go together (RFC 9112 section 6.1).
      reply.removeHeader('content-length')
      placed.trailers.push(name)
      reply.trailer(name, (_reply, _payload, callback) => {
        const values = digests.later()
        // Content that did not decode has no digest: Fastify leaves out a trailer that failed.
        if (values === null) callback(new Error(`${name}: the content did not decode`), '')
        else callback(null, field(algorithm, values.get(algorithm) as Buffer))
      })
    }
  }
  if (reprSupplied !== undefined) {
    const supplied = plan.reprAlgorithm as Algorithm
    place({ now: new Map([[supplied, reprSupplied]]) }, [['repr-digest', supplied]])
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
    // Unencoded-Digest in the header section it can check (sha-256, sha-512): only such a digest,
    // known now, is signed.
    const { algorithm, digests } = unencoded
    if (settings.signer !== null && digests !== null && 'now' in digests && !algorithm.deprecated) {
      const signature = settings.signer.signatureOf(field(algorithm, digests.now.get(algorithm) as Buffer))
      reply.header('signature-input', signature['signature-input'])
      reply.header('signature', signature.signature)
      placed.headers.push('signature-input', 'signature')
    }
  }
  return sending
}

/**
 * Takes back the fields an earlier pass of the hook placed: Fastify runs the hooks again to answer
 * an error (a stream that failed before its first byte), whose body they do not describe, and
 * whose Content-Length would otherwise go out with the chunked framing trailers asked for.
 */
function withdrawDigests (reply: DigestReply): void {
  const { headers, trailers } = reply[kSentDigests] as SentDigests
  for (const name of headers) reply.removeHeader(name)
  for (const name of trailers) reply.removeTrailer(name)
  if (trailers.length > 0) {
    reply.removeHeader('trailer')
    reply.removeHeader('transfer-encoding')
  }
  reply[kSentDigests] = null
}
