import { serializeByteSequence } from 'structured-headers'
import type { DigestProblemDocument } from '../types/index.js'
import { serializePreferences, type Settings } from './options.js'

/** Header names as they are written in responses and problem texts. */
export type FieldName = 'Content-Digest' | 'Repr-Digest' | 'Want-Content-Digest' | 'Want-Repr-Digest'

const problemMembers = {
  type: { type: 'string', format: 'uri', description: 'Problem type URI' },
  title: { type: 'string', description: 'Short human-readable summary' }
} as const

// One JSON schema per problem type: the plugin serializes with them, and applications can put them
// in route `response` schemas and OpenAPI documents as they are.
export const unsupportedAlgorithmSchema = {
  title: 'digest-unsupported-algorithm',
  description: 'A request names a hashing algorithm the server does not support.',
  type: 'object',
  required: ['type', 'title'],
  properties: {
    ...problemMembers,
    'unsupported-algorithm': { type: 'string', description: 'The algorithm key, taken from the request' }
  }
} as const

export const invalidValueSchema = {
  title: 'digest-invalid-value',
  description: 'An integrity field holds a value its algorithm cannot produce; the title says why.',
  type: 'object',
  required: ['type', 'title'],
  properties: { ...problemMembers }
} as const

export const mismatchingValueSchema = {
  title: 'digest-mismatching-value',
  description: 'A digest in an integrity field differs from the one the server calculated.',
  type: 'object',
  required: ['type', 'title'],
  properties: {
    ...problemMembers,
    algorithm: { type: 'string', description: 'Algorithm key of the hashing algorithm used' },
    'provided-digest': { type: 'string', description: 'Digest from the request, as a structured-field byte sequence' },
    'calculated-digest': { type: 'string', description: 'Digest the server calculated, as a structured-field byte sequence' }
  }
} as const

export const generalProblemSchema = {
  title: 'about:blank',
  description: 'A request the plugin refuses without a specific problem type (RFC 9457 section 4.2.1).',
  type: 'object',
  required: ['type', 'title'],
  properties: {
    ...problemMembers,
    detail: { type: 'string', description: 'What was wrong, when disclosure allows saying it' }
  }
} as const

export const digestProblemSchemas = {
  unsupportedAlgorithm: unsupportedAlgorithmSchema,
  invalidValue: invalidValueSchema,
  mismatchingValue: mismatchingValueSchema,
  general: generalProblemSchema
} as const

type ProblemSchema = typeof digestProblemSchemas[keyof typeof digestProblemSchemas]

/** A refused request: the error a hook hands to Fastify, answered by the plugin's error handler. */
export class DigestProblem extends Error {
  readonly statusCode = 400
  readonly code = 'FST_DIGEST_FIELDS_PROBLEM'

  constructor (
    /** The problem type that was found, logged even when the response does not disclose it. */
    readonly type: string,
    message: string,
    readonly document: DigestProblemDocument,
    readonly schema: ProblemSchema,
    readonly headers: Readonly<Record<string, string>> = {}
  ) {
    super(message)
    this.name = 'DigestProblem'
  }
}

// RFC 9457 section 4.2.1: the title of about:blank is the status phrase.
const undisclosed: DigestProblemDocument = Object.freeze({ type: 'about:blank', title: 'Bad Request' })

function problem (
  settings: Settings,
  document: DigestProblemDocument,
  schema: ProblemSchema,
  headers?: Record<string, string>
): DigestProblem {
  const message = document.detail ?? document.title
  // Problem-types section 7: a server may prefer a general problem over a specific one, since
  // detail reveals intermediaries and fingerprints the implementation. The log keeps the reason.
  if (settings.disclosure === 'none') return new DigestProblem(document.type, message, undisclosed, generalProblemSchema)
  return new DigestProblem(document.type, message, document, schema, headers)
}

function general (settings: Settings, detail: string, headers?: Record<string, string>): DigestProblem {
  return problem(settings, { ...undisclosed, detail }, generalProblemSchema, headers)
}

/** A field that is not a structured-field dictionary: never digest-invalid-value (problem-types section 4.2). */
export function malformedField (settings: Settings, field: FieldName, reason: string): DigestProblem {
  return general(settings, `${field} is not a valid structured-field dictionary: ${reason}`)
}

export function malformedPreference (settings: Settings, field: FieldName, key: string): DigestProblem {
  // RFC 9530 section 4: a preference is an Integer from 0 to 10.
  return general(settings, `${field} gives ${key} a preference that is not an integer from 0 to 10`)
}

export function missingIntegrityField (settings: Settings): DigestProblem {
  return general(
    settings,
    `this resource requires a Content-Digest or Repr-Digest field with one of: ${[...settings.algorithms.keys()].join(', ')}`,
    { 'want-content-digest': settings.wantField, 'want-repr-digest': settings.wantField }
  )
}

export function unverifiableContent (settings: Settings): DigestProblem {
  return general(settings, 'the integrity fields of this request cannot be verified: its content was read before the plugin could hash it')
}

export function unsupportedAlgorithm (settings: Settings, field: FieldName, key: string): DigestProblem {
  // RFC 9530 section 4: a preference of 0 marks the key as not acceptable, which is what the client needs to hear.
  const preferences = serializePreferences(new Map([...settings.preferences, [key, 0]]))
  const want = field === 'Repr-Digest' || field === 'Want-Repr-Digest' ? 'want-repr-digest' : 'want-content-digest'
  return problem(
    settings,
    { type: settings.typeBase + 'digest-unsupported-algorithm', title: 'Unsupported Hashing Algorithm', 'unsupported-algorithm': key },
    unsupportedAlgorithmSchema,
    { [want]: preferences }
  )
}

export function invalidValue (settings: Settings, reason: string): DigestProblem {
  return problem(settings, { type: settings.typeBase + 'digest-invalid-value', title: reason }, invalidValueSchema)
}

export function mismatchingValue (settings: Settings, algorithm: string, provided: Buffer, calculated: Buffer): DigestProblem {
  const document: DigestProblemDocument = {
    type: settings.typeBase + 'digest-mismatching-value',
    title: 'Mismatching Digest Value',
    algorithm,
    'provided-digest': serializeByteSequence(provided)
  }
  // The calculated digest lets a client see what the server received, but it is also an oracle:
  // later revisions of the draft dropped it, so operators may leave it out.
  if (settings.disclosure === 'full') document['calculated-digest'] = serializeByteSequence(calculated)
  return problem(settings, document, mismatchingValueSchema)
}
