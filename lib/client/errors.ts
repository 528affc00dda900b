/** The errors of the client entry: a response whose digest failed, and a problem response parsed. */
import type { IncomingHttpHeaders } from 'node:http'

/** The field a response digest came in. */
export type ResponseDigestField = 'content-digest' | 'repr-digest' | 'unencoded-digest'

/**
 * A response body whose digest did not match: its consumer gets this error in place of the end,
 * as the server's readers get the problem, so that no one sees a complete body that failed.
 */
export class DigestMismatchError extends Error {
  readonly code = 'FST_DIGEST_FIELDS_RESPONSE_MISMATCH'

  constructor (
    readonly field: ResponseDigestField,
    readonly algorithm: string,
    /** The value the response carried. */
    readonly expected: Buffer,
    /** The digest of what was received. */
    readonly received: Buffer
  ) {
    super(`${field} ${algorithm} of the response does not match its content`)
    this.name = 'DigestMismatchError'
  }
}

/** A response the client could not verify, when the interceptor's `unverifiable` is 'require'. */
export class DigestUnverifiableError extends Error {
  readonly code = 'FST_DIGEST_FIELDS_RESPONSE_UNVERIFIABLE'

  constructor (readonly reason: string) {
    super(`the response cannot be verified: ${reason}`)
    this.name = 'DigestUnverifiableError'
  }
}

/** The three kinds of digest problem (problem-types sections 4.1 to 4.3), in either shape. */
export type DigestProblemKind = 'unsupported-algorithm' | 'invalid-value' | 'mismatching-value'

// The draft-00 names and the registered ones, after the '#' of the type URI.
const kinds: ReadonlyMap<string, DigestProblemKind> = new Map([
  ['digest-unsupported-algorithm', 'unsupported-algorithm'],
  ['digest-unsupported-algorithms', 'unsupported-algorithm'],
  ['digest-invalid-value', 'invalid-value'],
  ['digest-invalid-values', 'invalid-value'],
  ['digest-mismatching-value', 'mismatching-value'],
  ['digest-mismatched-values', 'mismatching-value']
])

/** A digest problem response, parsed: what the server found, and what it asks for instead. */
export class DigestProblemError extends Error {
  readonly code = 'FST_DIGEST_FIELDS_PROBLEM_RESPONSE'

  constructor (
    readonly kind: DigestProblemKind,
    readonly statusCode: number,
    /** The problem document as sent. */
    readonly document: Readonly<Record<string, unknown>>,
    /** The preference fields of the response (`want-content-digest`, ...), as sent. */
    readonly want: Readonly<Record<string, string>>
  ) {
    super(`${String(document.title ?? kind)} (${statusCode})`)
    this.name = 'DigestProblemError'
  }

  /**
   * The problem a response answers with, or null when it is not a digest problem: its status, its
   * headers and its body (text, bytes, or the parsed JSON).
   */
  static from (statusCode: number, headers: IncomingHttpHeaders, body: unknown):
  DigestProblemError | null {
    const mediaType = String(headers['content-type'] ?? '').split(';')[0]?.trim().toLowerCase()
    if (statusCode < 400 || mediaType !== 'application/problem+json') return null
    let document: unknown = body
    if (typeof body === 'string' || Buffer.isBuffer(body)) {
      try {
        document = JSON.parse(body.toString())
      } catch {
        return null
      }
    }
    const type = (document as { type?: unknown } | null)?.type
    if (typeof type !== 'string') return null
    const kind = kinds.get(type.slice(type.lastIndexOf('#') + 1))
    if (kind === undefined) return null
    const want: Record<string, string> = {}
    for (const field of ['want-content-digest', 'want-repr-digest', 'want-unencoded-digest']) {
      const value = headers[field]
      if (value !== undefined) want[field] = Array.isArray(value) ? value.join(', ') : value
    }
    return new DigestProblemError(kind, statusCode, document as Record<string, unknown>, want)
  }
}
