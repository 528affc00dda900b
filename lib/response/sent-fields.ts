/**
 * The digest fields a response sends: found over its payload, then placed on the reply at once,
 * in the same turn as Fastify writes it, and taken back when Fastify runs the hooks again.
 */
import type { FastifyReply, FastifyRequest } from 'fastify'
import { distinct, type Algorithm } from '../fields/algorithms.js'
import type { Settings } from '../options/settings.js'
import { fileOf, type Coverage } from './coverage.js'
import { addVary, field } from './fields.js'
import type { FileDigests } from './file-digests.js'
import { canTrail, digestsOfPayload, type Digests } from './payload-digests.js'
import { replyState, type Unencoded } from './reply-state.js'

type SentField = 'content-digest' | 'repr-digest'
type TrailerValue = (reply: FastifyReply, payload: unknown, callback: (error: Error | null, value: string) => void) => void

/**
 * The codings to remove from the payload that reaches the last hook to find its Unencoded-Digest
 * again, or null when what the first hook found still holds: nothing between changed the payload
 * (`untouched`), its status or its codings, or a hook only added a coding as a stream
 * (@fastify/compress), which is not decoded before it is sent (docs/responses.md says what that
 * leaves out).
 */
export function codingsToFindAgain (found: Unencoded, status: number, payload: unknown, codings: readonly string[],
  untouched: boolean): readonly string[] | null {
  const kept = found.codings.every((coding, i) => codings[i] === coding)
  const added = codings.length > found.codings.length
  const codedStream = !untouched && typeof (payload as { pipe?: unknown } | null)?.pipe === 'function'
  if (status === found.status && kept && (added ? codedStream : untouched)) return null
  return codings
}

/** A signature needs its Unencoded-Digest first; a HEAD, which no browser checks, is not worth a hash. */
export function mustHashToSign (request: FastifyRequest, settings: Settings): boolean {
  return settings.signer !== null && request.method !== 'HEAD'
}

/** What a response sends, found before any of it is placed. */
export interface Sending {
  readonly contentAlgorithm: Algorithm | null
  readonly reprAlgorithm: Algorithm | null
  /** The application's digest of the representation, with `reprAlgorithm`, sent as it is. */
  readonly reprSupplied: Buffer | undefined
  /** The Unencoded-Digest found before a content coding was added, when one is sent. */
  readonly unencoded: Unencoded | null
  /** The codings to remove to find it again over this payload (codingsToFindAgain), or null. */
  readonly unencodedAgain: readonly string[] | null
  /** The preference fields the response varies on. */
  readonly varies: readonly string[]
  readonly covers: Coverage
  readonly files: FileDigests
  readonly settings: Settings
}

/** The fields found for a payload, and the payload to send (a stream hashed as it goes, for a trailer section). */
export interface Placement {
  readonly payload: unknown
  readonly varies: readonly string[]
  readonly headers: Array<[string, string]>
  readonly trailers: Array<[SentField | 'unencoded-digest', TrailerValue]>
}

/**
 * Finds the digests a response sends, each for the header or the trailer section, and signs.
 * Nothing is placed yet: a second send of the same reply (an async handler that called
 * reply.send() and returned nothing) may run the hooks meanwhile, and must not mix its fields in.
 */
export async function findDigestFields (request: FastifyRequest, reply: FastifyReply, payload: unknown, plan: Sending):
Promise<Placement> {
  const { contentAlgorithm, reprSupplied, covers, files, settings } = plan
  const reprAlgorithm = reprSupplied === undefined ? plan.reprAlgorithm : null
  const file = fileOf(reply, payload)
  const contentOf = (sent: unknown): unknown => reply.statusCode === 204 ? '' : sent ?? ''
  let sending = payload
  let unencoded = plan.unencoded
  if (unencoded !== null && plan.unencodedAgain !== null) {
    // A 204's content is empty, with nothing to decode whatever its Content-Encoding says.
    const codings = reply.statusCode === 204 ? [] : plan.unencodedAgain
    const digests = await digestsOfPayload(contentOf(payload), codings, [unencoded.algorithm], file, files,
      mustHashToSign(request, settings), canTrail(request))
    if (digests !== null && 'payload' in digests) sending = digests.payload
    unencoded = { ...unencoded, digests }
  }
  const sent: Array<[SentField, Algorithm]> = []
  // The content sent, and the representation when the content is all of it, are the same bytes.
  if (contentAlgorithm !== null) sent.push(['content-digest', contentAlgorithm])
  if (reprAlgorithm !== null && covers.repr === 'payload') sent.push(['repr-digest', reprAlgorithm])
  const headers: Placement['headers'] = []
  const trailers: Placement['trailers'] = []
  const add = (digests: Digests, fields: ReadonlyArray<[SentField | 'unencoded-digest', Algorithm]>): void => {
    if (digests === null) return
    for (const [name, algorithm] of fields) {
      if ('now' in digests) {
        headers.push([name, field(algorithm, digests.now.get(algorithm) as Buffer)])
        continue
      }
      trailers.push([name, (_reply, _payload, callback) => {
        const values = digests.later()
        // Content that did not decode has no digest: Fastify leaves out a trailer that failed.
        if (values === null) callback(new Error(`${name}: the content did not decode`), '')
        else callback(null, field(algorithm, values.get(algorithm) as Buffer))
      }])
    }
  }
  if (reprSupplied !== undefined) {
    const supplied = plan.reprAlgorithm as Algorithm
    add({ now: new Map([[supplied, reprSupplied]]) }, [['repr-digest', supplied]])
  }
  if (sent.length > 0) {
    const digests = await digestsOfPayload(contentOf(sending), [], distinct(sent.map(([, algorithm]) => algorithm)), file,
      files, false, canTrail(request))
    if (digests !== null && 'payload' in digests) sending = digests.payload
    add(digests, sent)
  }
  // A 206 or a 304 carries the digest of the whole representation, which only a file can give.
  if (reprAlgorithm !== null && covers.repr === 'supplied' && file !== null) {
    add(await digestsOfPayload(null, [], [reprAlgorithm], { path: file.path }, files, false, false),
      [['repr-digest', reprAlgorithm]])
  }
  if (unencoded !== null) {
    add(unencoded.digests, [['unencoded-digest', unencoded.algorithm]])
    // Chromium refuses every response whose signature fails, or that is signed without an
    // Unencoded-Digest in the header section it can check (sha-256, sha-512): only such a digest,
    // known now, is signed.
    const { algorithm, digests } = unencoded
    if (settings.signer !== null && digests !== null && 'now' in digests && !algorithm.deprecated) {
      const signature = settings.signer.signatureOf(field(algorithm, digests.now.get(algorithm) as Buffer))
      headers.push(['signature-input', signature['signature-input']], ['signature', signature.signature])
    }
  }
  return { payload: sending, varies: plan.varies, headers, trailers }
}

/** Places the fields found on the reply, which Fastify writes in the same turn. */
export function placeDigestFields (reply: FastifyReply, placement: Placement): void {
  // A response that depends on the preference fields says so to caches (RFC 9110 section 12.5.5).
  if (placement.varies.length > 0) addVary(reply, placement.varies)
  for (const [name, value] of placement.headers) reply.header(name, value)
  // Trailers and Content-Length do not go together (RFC 9112 section 6.1).
  if (placement.trailers.length > 0) reply.removeHeader('content-length')
  for (const [name, value] of placement.trailers) reply.trailer(name, value)
  replyState(reply).sent = {
    headers: placement.headers.map(([name]) => name),
    trailers: placement.trailers.map(([name]) => name)
  }
}

/**
 * Takes back the fields an earlier pass of the hook placed, if any: Fastify runs the hooks again to answer
 * an error (a stream that failed before its first byte), whose body they do not describe, and
 * whose Content-Length would otherwise go out with the chunked framing trailers asked for.
 */
export function withdrawDigestFields (reply: FastifyReply): void {
  const state = replyState(reply)
  if (state.sent === null) return
  const { headers, trailers } = state.sent
  for (const name of headers) reply.removeHeader(name)
  for (const name of trailers) reply.removeTrailer(name)
  if (trailers.length > 0) {
    reply.removeHeader('trailer')
    reply.removeHeader('transfer-encoding')
    // Node frames a response whose Transfer-Encoding and Content-Length were removed with neither,
    // to the close of the connection: the next answer is framed as any other (RFC 9112 section 6).
    if (!reply.raw.headersSent) Object.assign(reply.raw, { _removedTE: false, _removedContLen: false })
  }
  state.sent = null
}
