/**
 * The JSON schemas of the problem documents: the plugin serializes with them, and applications can
 * put them in route `response` schemas and OpenAPI documents as they are.
 */

const problemMembers = {
  type: { type: 'string', format: 'uri', description: 'Problem type URI' },
  title: { type: 'string', description: 'Short human-readable summary' },
  detail: {
    type: 'string',
    description: 'What was wrong, or what the document does not list, when disclosure allows saying it'
  }
} as const

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
    'calculated-digest': {
      type: 'string',
      description: 'Digest the server calculated, as a structured-field byte sequence'
    }
  }
} as const

export const generalProblemSchema = {
  title: 'about:blank',
  description: 'A request the plugin refuses without a specific problem type (RFC 9457 section 4.2.1).',
  type: 'object',
  required: ['type', 'title'],
  properties: { ...problemMembers }
} as const

// The registered shape (draft-ietf-httpapi-digest-fields-problem-types-06, IANA HTTP Problem
// Types): plural types whose member lists every finding of its kind, each naming its field.
type Members = Record<string, { type: 'string', description: string }>

function listOf (member: string, description: string, entry: Members, required: readonly string[]) {
  return {
    type: 'object',
    required: ['type', 'title'],
    properties: {
      ...problemMembers,
      [member]: {
        type: 'array',
        description,
        items: { type: 'object', required, properties: entry }
      }
    }
  } as const
}

const algorithmMember = { type: 'string', description: 'The algorithm key, taken from the request' } as const
const headerMember = { type: 'string', description: 'The field that named it' } as const

export const unsupportedAlgorithmsSchema = {
  title: 'digest-unsupported-algorithms',
  description: 'A request names hashing algorithms the server does not support.',
  ...listOf('unsupported_algorithms', 'Every unsupported key, with the field that named it',
    { algorithm: algorithmMember, header: headerMember }, ['algorithm', 'header'])
} as const

export const invalidValuesSchema = {
  title: 'digest-invalid-values',
  description: 'Integrity fields hold values their algorithms cannot produce.',
  ...listOf('invalid_digests', 'Every invalid value, with its field and why it is invalid',
    {
      algorithm: algorithmMember,
      header: headerMember,
      reason: { type: 'string', description: 'Why the value is invalid, for people' }
    },
    ['algorithm', 'header', 'reason'])
} as const

export const mismatchedValuesSchema = {
  title: 'digest-mismatched-values',
  description: 'Digests in integrity fields differ from those the server calculated.',
  ...listOf('mismatched_digests', 'Every value that differs, with its field',
    {
      algorithm: algorithmMember,
      header: headerMember,
      provided_digest: { type: 'string', description: 'Digest from the request, as a structured-field byte sequence' }
    },
    ['algorithm', 'header', 'provided_digest'])
} as const

export const mismatchingUploadOffsetSchema = {
  title: 'mismatching-upload-offset',
  description: 'An append names an offset other than the upload\'s (draft-ietf-httpbis-resumable-upload).',
  type: 'object',
  required: ['type', 'title', 'expected-offset'],
  properties: {
    ...problemMembers,
    'expected-offset': { type: 'integer', description: 'The offset of the upload resource' },
    'provided-offset': { type: 'integer', description: 'The offset of the append request, when it named a valid one' }
  }
} as const

export const inconsistentUploadLengthSchema = {
  title: 'inconsistent-upload-length',
  description: 'The length indications of an upload disagree, or its content goes past its length (draft-ietf-httpbis-resumable-upload).',
  type: 'object',
  required: ['type', 'title'],
  properties: problemMembers
} as const

export const digestProblemSchemas = {
  unsupportedAlgorithm: unsupportedAlgorithmSchema,
  invalidValue: invalidValueSchema,
  mismatchingValue: mismatchingValueSchema,
  unsupportedAlgorithms: unsupportedAlgorithmsSchema,
  invalidValues: invalidValuesSchema,
  mismatchedValues: mismatchedValuesSchema,
  general: generalProblemSchema,
  mismatchingUploadOffset: mismatchingUploadOffsetSchema,
  inconsistentUploadLength: inconsistentUploadLengthSchema
} as const

export type ProblemSchema = typeof digestProblemSchemas[keyof typeof digestProblemSchemas]
