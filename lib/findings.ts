/**
 * What the checks find wrong with a request, independent of how it will be answered: the checks
 * collect findings, and a renderer (problems.ts) turns those of one kind into a problem document
 * of the shape the route sends.
 */

/** Field names as they are written in responses and problem documents. */
export type IntegrityFieldName = 'Content-Digest' | 'Repr-Digest' | 'Unencoded-Digest'
export type PreferenceFieldName = 'Want-Content-Digest' | 'Want-Repr-Digest' | 'Want-Unencoded-Digest'
export type FieldName = IntegrityFieldName | PreferenceFieldName

/** A key named in an integrity or preference field that the route does not support. */
export interface UnsupportedAlgorithm {
  readonly kind: 'unsupported'
  readonly algorithm: string
  readonly header: FieldName
}

/** A value its algorithm cannot produce. */
export interface InvalidValue {
  readonly kind: 'invalid'
  readonly algorithm: string
  readonly header: IntegrityFieldName
  readonly reason: string
}

/** A value that differs from the digest calculated over what was received. */
export interface MismatchedValue {
  readonly kind: 'mismatched'
  readonly algorithm: string
  readonly header: IntegrityFieldName
  readonly provided: Buffer
  readonly calculated: Buffer
}

/**
 * Anything else the plugin refuses, answered with about:blank: a field that is not a dictionary
 * (never digest-invalid-value, problem-types section 4.2), a preference out of range, a missing
 * field, content that cannot be verified. `status` is 400 unless said.
 */
export interface GeneralFinding {
  readonly kind: 'general'
  readonly detail: string
  readonly status?: number
  /** Preference fields to send, advertising what the route supports. */
  readonly advertise?: boolean
}

export type DigestFinding = UnsupportedAlgorithm | InvalidValue | MismatchedValue

export type Finding = DigestFinding | GeneralFinding

/** The preference field that answers for a field (RFC 9530 section 4, unencoded-digest section 3). */
export function preferenceFieldOf (header: FieldName): PreferenceFieldName {
  if (header.endsWith('Content-Digest')) return 'Want-Content-Digest'
  if (header.endsWith('Repr-Digest')) return 'Want-Repr-Digest'
  return 'Want-Unencoded-Digest'
}

// What the plugin sends back and logs stays bounded whatever the request carried (a field can hold
// thousands of keys, a key thousands of characters): at most `maxListed` findings are listed, and
// a key is repeated only when it is at most `maxKeyLength` characters long (registered keys are
// under 16).
export const maxListed = 10
export const maxKeyLength = 64

/** Whether a finding's key is short enough to repeat in a problem document or a Want-* field. */
export function isListable (finding: DigestFinding): boolean {
  return finding.algorithm.length <= maxKeyLength
}

/** Text from the request for people to read (a detail, a log message): cut at `maxKeyLength` characters. */
export function shortened (text: string): string {
  return text.length <= maxKeyLength ? text : `${text.slice(0, maxKeyLength)}…`
}

/** A route with `required` got content with no integrity field it could check. */
export function missingField (supported: Iterable<string>): GeneralFinding {
  return {
    kind: 'general',
    detail: `this resource requires a Content-Digest, Repr-Digest or Unencoded-Digest field with one of: ${[...supported].join(', ')}`,
    advertise: true
  }
}
