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

/**
 * An upload whose length indications disagree, or whose content goes past its length or stops
 * short of it on completion (draft-ietf-httpbis-resumable-upload-15 section 4.1.3).
 */
export interface InconsistentUploadLength {
  readonly kind: 'upload-length'
  readonly detail: string
}

export type DigestFinding = UnsupportedAlgorithm | InvalidValue | MismatchedValue

export type Finding = DigestFinding | GeneralFinding | InconsistentUploadLength

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

function general (detail: string, status?: number): GeneralFinding {
  return status === undefined ? { kind: 'general', detail } : { kind: 'general', detail, status }
}

const unverifiable = 'the content cannot be verified'
const unencodedUnverifiable = 'Unencoded-Digest cannot be verified'

/** Every refusal without a specific problem type (about:blank), by what causes it. */
export const refusals = {
  /** A field is not a dictionary: never digest-invalid-value (problem-types section 4.2). */
  notADictionary: (field: FieldName, reason: string) =>
    general(`${field} is not a valid structured-field dictionary: ${reason}`),
  /** RFC 9530 section 4: a preference is an Integer from 0 to 10. */
  badPreference: (field: FieldName, key: string) =>
    general(`${field} gives ${shortened(key)} a preference that is not an integer from 0 to 10`),
  /** A route with `required` got content with no integrity field it could check. */
  missingField: (supported: Iterable<string>): GeneralFinding => ({
    kind: 'general',
    detail: 'this resource requires a Content-Digest, Repr-Digest or Unencoded-Digest field with one of: ' +
      [...supported].join(', '),
    advertise: true
  }),
  readBeforeHook: () =>
    general('the integrity fields of this request cannot be verified: ' +
      'its content was read before the plugin could hash it'),
  transferCoding: (coding: string) =>
    general(`${unverifiable}: this server does not remove its transfer coding ${shortened(coding)}`),
  ambiguousBoundary: () =>
    general(`${unverifiable}: its multipart boundary cannot be read unambiguously from Content-Type`),
  longEpilogue: (limit: number) =>
    general(`${unverifiable}: more than ${limit} bytes follow its multipart close delimiter`),
  unannouncedTrailer: () => general('the integrity fields in the trailer section of this request cannot be verified: ' +
    'announce them in a Trailer field, so that the content is hashed as it arrives'),
  notHashedWith: (field: IntegrityFieldName, key: string) =>
    general(`${field} in the trailer section names ${key}, which the content was not hashed with: ` +
      'announce the field in Trailer'),
  unencodedTrailerNotDecoded: () =>
    general('Unencoded-Digest in the trailer section cannot be verified: the content was not decoded for it; ' +
      'announce it in a Trailer field'),
  tooManyCodings: (limit: number) =>
    general(`${unencodedUnverifiable}: this server removes at most ${limit} content codings`),
  unknownCoding: (coding: string) =>
    general(`${unencodedUnverifiable}: this server cannot remove the content coding ${shortened(coding)}`),
  bytesAfterCoding: (coding: string) =>
    general(`${unencodedUnverifiable}: the content has bytes after the end of its ${coding} coding`),
  undecodable: (reason: string) => general(`${unencodedUnverifiable}: the content does not decode: ${reason}`),
  /** draft-ietf-httpbis-resumable-upload: an append or creation says whether it completes the upload. */
  uploadComplete: () => general('Upload-Complete must be a structured-field Boolean, ?0 or ?1'),
  uploadRole: (append: boolean) => general(append
    ? 'this resource creates uploads: an append goes to the upload resource its creation named'
    : 'this resource takes appends to its upload: Content-Type: application/partial-upload'),
  /** The upload's Repr-Digest is the creation's, known before any of its content (resumable.ts). */
  uploadCompleted: () => general('the upload is complete: it takes no more content'),
  uploadStateUnreadable: () => general('the upload cannot be resumed: the state stored with it does not read'),
  uploadReprTrailer: () => general('the Repr-Digest of an upload goes in the header section of its creation, ' +
    'not in a trailer section'),
  decodesPastLimit: (limit: number) =>
    general(`${unencodedUnverifiable}: the content decodes to more than ${limit} bytes`, 413)
} as const
