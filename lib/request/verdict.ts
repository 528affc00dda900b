/** The verdict on a request's content once it is complete: its digests compared with every expected value. */
import { timingSafeEqual } from 'node:crypto'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { channels } from '../channels.js'
import type { IncomingHttpHeaders } from 'node:http'
import type { DigestAlgorithm, DigestFieldName, VerifiedDigest } from '../types.js'
import type { Algorithm } from '../fields/algorithms.js'
import { judgeFields, type Expectation } from './judge-fields.js'
import { refusals, type Finding, type GeneralFinding, type MismatchedValue } from '../findings.js'
import type { Settings } from '../options/settings.js'
import { maxEpilogue, type HeldContent } from '../fields/held-content.js'
import { problemFor, type DigestProblem } from '../problems/problems.js'
import { hasIntegrityTrailer, type Source } from './source.js'
import type { UnencodedHasher } from '../fields/unencoded.js'
import type { RunningDigest } from './content-hashes.js'

/** What the verifier needs to know about a request; what it verified or refused goes to the request. */
export interface Verification {
  readonly request: FastifyRequest
  readonly reply: FastifyReply
  readonly settings: Settings
  /** The values of the header section's integrity fields. */
  readonly expectations: readonly Expectation[]
  /** The algorithms the bytes received are hashed with, each once. */
  readonly algorithms: readonly Algorithm[]
  /** Hashes the decoded content, when Unencoded-Digest is checked and a content coding applies. */
  readonly unencoded: UnencodedHasher | null
  /** Whether Content-Range or an upload makes the request partial (its Repr-Digest is not compared). */
  readonly partial: boolean
  /** The resumable upload the content goes to, whose running digest it continues. */
  readonly upload: RunningDigest | null
  /** Whether a content coding applies, which an Unencoded-Digest must be checked without. */
  readonly coded: boolean
  /** A multipart body's close delimiter, after which everything is held until the verdict. */
  readonly closeDelimiter: Buffer | null
  /** The content's length when the connection enforces it (framing.ts), else NaN. */
  readonly length: number
}

/** Tells the handler, and the subscribers of requestVerified, what the content was verified against. */
export function verifiedAs (request: FastifyRequest, digest: VerifiedDigest): void {
  request.digest = digest
  if (channels.requestVerified.hasSubscribers) {
    const algorithms = [...new Set([...Object.keys(digest.values), ...Object.keys(digest.unencoded)])]
    channels.requestVerified.publish({ request, fields: digest.fields, algorithms })
  }
}

/** The digests calculated over the content: of the bytes received, and of the decoded content. */
export interface Digests {
  readonly received: ReadonlyMap<Algorithm, Buffer>
  /** null when Unencoded-Digest is checked against the bytes received (no content coding). */
  readonly unencoded: ReadonlyMap<Algorithm, Buffer> | null
}

/**
 * Checks every expected value against the digest calculated for its algorithm and returns what was
 * verified, or every finding: a mismatch, or a value whose algorithm was not hashed (a trailer field
 * that named one nothing announced).
 */
export function compareDigests (expectations: readonly Expectation[], digests: Digests): VerifiedDigest | Finding[] {
  const fields: DigestFieldName[] = []
  const values: Partial<Record<DigestAlgorithm, Buffer>> = {}
  const unencoded: Partial<Record<DigestAlgorithm, Buffer>> = {}
  const mismatched: MismatchedValue[] = []
  for (const { field, header, algorithm, value } of expectations) {
    const decoded = field === 'unencoded-digest' && digests.unencoded !== null
    const digest = (decoded ? digests.unencoded as ReadonlyMap<Algorithm, Buffer> : digests.received).get(algorithm)
    if (digest === undefined) {
      return [refusals.notHashedWith(header, algorithm.key)]
    }
    // Equal lengths are guaranteed by judgeFields; timingSafeEqual reads every byte, so the time
    // taken tells nothing about how much of a guessed digest was right.
    if (!timingSafeEqual(digest, value)) {
      mismatched.push({ kind: 'mismatched', algorithm: algorithm.key, header, provided: value, calculated: digest })
      continue
    }
    if (!fields.includes(field)) fields.push(field)
    ;(field === 'unencoded-digest' ? unencoded : values)[algorithm.key] = digest
  }
  return mismatched.length > 0 ? mismatched : { fields, values, unencoded }
}

/** What a complete content is judged on. */
export interface Completed {
  readonly settings: Settings
  /** The values of the header section's integrity fields. */
  readonly expectations: readonly Expectation[]
  readonly partial: boolean
  readonly coded: boolean
  /** Whether the content was decoded for an Unencoded-Digest. */
  readonly decoded: boolean
  readonly trailers: IncomingHttpHeaders | undefined
  readonly received: ReadonlyMap<Algorithm, Buffer>
  /** The decoded content's digests, or why there are none; null when nothing was decoded. */
  readonly unencoded: ReadonlyMap<Algorithm, Buffer> | GeneralFinding | null
  /** More followed a multipart close delimiter than could be held. */
  readonly overflowed: boolean
  readonly upload: RunningDigest | null
}

/** What was verified, or the findings that refuse the content. */
export function verdictOf (content: Completed): VerifiedDigest | Finding[] {
  const { settings, expectations, partial, coded, decoded, trailers, received, unencoded } = content
  let all = expectations
  if (hasIntegrityTrailer(trailers)) {
    if (content.upload !== null && (trailers as IncomingHttpHeaders)['repr-digest'] !== undefined) {
      return [refusals.uploadReprTrailer()]
    }
    // RFC 9530 sections 2 and 3: the trailer section's fields are judged like the header
    // section's, with the same problem types.
    const judgement = judgeFields(trailers as IncomingHttpHeaders, settings, partial)
    if (judgement.findings.length > 0) return [...judgement.findings]
    // Coded content was decoded only for a field the header section named or announced.
    if (coded && !decoded && judgement.expectations.some(({ field }) => field === 'unencoded-digest')) {
      return [refusals.unencodedTrailerNotDecoded()]
    }
    all = [...expectations, ...judgement.expectations]
  }
  if (unencoded !== null && !(unencoded instanceof Map)) return [unencoded as GeneralFinding]
  if (content.overflowed) {
    return [refusals.longEpilogue(maxEpilogue)]
  }
  // A field announced in Trailer but never sent leaves nothing checked, which `required` refuses.
  if (all.length === 0 && settings.required && content.upload?.checked !== true) {
    return [refusals.missingField(settings.algorithms.keys())]
  }
  const verdict = compareDigests(all, { received, unencoded: unencoded as ReadonlyMap<Algorithm, Buffer> | null })
  // The whole upload is compared once this request's own content passed (draft-ietf-httpbis-
  // resumable-upload, "Integrity Digests").
  return Array.isArray(verdict) ? verdict : content.upload?.findings() ?? verdict
}

/**
 * Settles a complete content's verification: the rest of a coded content is decoded, the trailer
 * section judged and the digests compared; `callback` gets the problem, or null once `verified`
 * was told what was. Synchronous unless a content coding has to be removed.
 */
export function judgeContent (
  verification: Verification,
  received: ReadonlyMap<Algorithm, Buffer>,
  source: Source,
  held: HeldContent,
  callback: (problem: DigestProblem | null) => void
): void {
  const decide = (unencoded: Map<Algorithm, Buffer> | GeneralFinding | null): void => {
    // Named one by one: spreading the verification, whose methods are closures, cost several µs.
    const verdict = verdictOf({
      settings: verification.settings,
      expectations: verification.expectations,
      partial: verification.partial,
      coded: verification.coded,
      upload: verification.upload,
      decoded: verification.unencoded !== null,
      trailers: source.trailers,
      received,
      unencoded,
      overflowed: held.overflowed
    })
    if (Array.isArray(verdict)) {
      callback(problemFor(verification.settings, verdict))
      return
    }
    if (verdict.fields.length > 0) verifiedAs(verification.request, verdict)
    verification.upload?.accept()
    callback(null)
  }
  if (verification.unencoded === null) decide(null)
  else verification.unencoded.end(decide)
}
