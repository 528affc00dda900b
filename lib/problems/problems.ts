/** The renderers: findings of one kind turned into the problem document of the route's shape. */
import { serializeByteSequence } from 'structured-headers'
import type { DraftProblemDocument } from './documents.js'
import { DigestProblem } from './digest-problem.js'
import { inconsistentUploadLength } from './upload-problems.js'
import { problemCodes } from '../errors.js'
import {
  isListable,
  maxKeyLength,
  maxListed,
  preferenceFieldOf,
  shortened,
  type DigestFinding,
  type FieldName,
  type Finding,
  type GeneralFinding,
  type InvalidValue,
  type MismatchedValue,
  type UnsupportedAlgorithm
} from '../findings.js'
import { serializePreferences } from '../fields/preferences.js'
import type { Settings } from '../options/settings.js'
import {
  generalProblemSchema,
  invalidValueSchema,
  invalidValuesSchema,
  mismatchedValuesSchema,
  mismatchingValueSchema,
  unsupportedAlgorithmSchema,
  unsupportedAlgorithmsSchema
} from './schemas.js'

export { DigestProblem }

type Unsupported = UnsupportedAlgorithm

const preferenceFields = ['want-content-digest', 'want-repr-digest', 'want-unencoded-digest']

// RFC 9457 section 4.2.1: the title of about:blank is the status phrase.
const statusPhrases: Readonly<Record<number, string>> = { 400: 'Bad Request', 413: 'Content Too Large' }

/**
 * Makes what the problem answers with ignore writes from others: @fastify/compress assigns its own
 * error's fields to the error its decompressor receives (onDecompressError), which is this problem
 * when the plugin fails the request stream, and a 413 was then answered as 400.
 */
function keepingItsFields (problem: DigestProblem): DigestProblem {
  for (const name of ['name', 'message', 'code', 'statusCode'] as const) {
    const value = problem[name]
    const enumerable = name !== 'message' && name !== 'name'
    Object.defineProperty(problem, name, { get: () => value, set: () => {}, enumerable })
  }
  return problem
}

/** The preference field a route sends, with each of `refused` marked not acceptable (0, RFC 9530 section 4). */
function advertised (settings: Settings, refused: readonly string[]): string {
  const preferences = new Map(settings.preferences)
  for (const key of refused) preferences.set(key, 0)
  return serializePreferences(preferences)
}

function general (settings: Settings, finding: GeneralFinding): DigestProblem {
  const status = finding.status ?? 400
  const headers: Record<string, string> = {}
  if (finding.advertise === true) {
    for (const field of preferenceFields) headers[field] = settings.wantField
  }
  const document = { type: 'about:blank', title: statusPhrases[status] as string, detail: finding.detail }
  return new DigestProblem('about:blank', finding.detail, document, generalProblemSchema, headers, status)
}

/**
 * The preference fields that answer unsupported keys: one for each field that named one, with the
 * listed keys at 0.
 */
function unsupportedHeaders (settings: Settings, findings: readonly Unsupported[], listed: readonly Unsupported[]):
Record<string, string> {
  const refused = new Map<string, string[]>()
  const fieldOf = (header: FieldName): string => preferenceFieldOf(header).toLowerCase()
  for (const { header } of findings) refused.set(fieldOf(header), [])
  for (const { algorithm, header } of listed) (refused.get(fieldOf(header)) as string[]).push(algorithm)
  return Object.fromEntries([...refused].map(([field, keys]) => [field, advertised(settings, keys)]))
}

function describe (listed: readonly DigestFinding[], notListed: number): string {
  const named = listed.map(({ header, algorithm }) => `${header} ${shortened(algorithm)}`).join(', ')
  return notListed === 0 ? named : `${named}, and ${notListed} more not listed`
}

/** What a document says of the findings it leaves out, if any. */
function notListedDetail (notListed: number): { detail?: string } {
  return notListed === 0 ? {} : { detail: `${notListed} more not listed` }
}

// problem-types.md: one problem, the first of its kind, with singular members.
function draft00 (settings: Settings, first: DigestFinding): DigestProblem {
  const base = settings.typeBase
  const message = describe([first], 0)
  switch (first.kind) {
    case 'unsupported': {
      const listable = isListable(first)
      return new DigestProblem(base + 'digest-unsupported-algorithm', `Unsupported Hashing Algorithm: ${message}`, {
        type: base + 'digest-unsupported-algorithm',
        title: 'Unsupported Hashing Algorithm',
        ...(listable
          ? { 'unsupported-algorithm': first.algorithm }
          : { detail: `the key is over ${maxKeyLength} characters long` })
      }, unsupportedAlgorithmSchema, unsupportedHeaders(settings, [first], listable ? [first] : []))
    }
    case 'invalid':
      return new DigestProblem(base + 'digest-invalid-value', `Invalid Digest Value: ${message}`, {
        type: base + 'digest-invalid-value',
        title: `digest value for ${first.algorithm} ${first.reason}`
      }, invalidValueSchema)
    case 'mismatched': {
      const document: DraftProblemDocument = {
        type: base + 'digest-mismatching-value',
        title: 'Mismatching Digest Value',
        algorithm: first.algorithm,
        'provided-digest': serializeByteSequence(first.provided)
      }
      // The calculated digest lets a client see what the server received, but it is also an
      // oracle: later revisions of the draft dropped it, so operators may leave it out.
      if (settings.disclosure === 'full') document['calculated-digest'] = serializeByteSequence(first.calculated)
      const type = base + 'digest-mismatching-value'
      return new DigestProblem(type, `Mismatching Digest Value: ${message}`, document, mismatchingValueSchema)
    }
  }
}

// registered-problem-types.md: every finding of the kind, each with its field; never a calculated
// digest. Past `maxListed`, a detail says how many more there were.
function registered (settings: Settings, findings: readonly DigestFinding[], listed: readonly DigestFinding[]):
DigestProblem {
  const base = settings.typeBase
  const notListed = findings.length - listed.length
  const message = describe(listed, notListed)
  switch ((findings[0] as DigestFinding).kind) {
    case 'unsupported': {
      const list = listed as readonly UnsupportedAlgorithm[]
      return new DigestProblem(base + 'digest-unsupported-algorithms', `Unsupported Hashing Algorithms: ${message}`, {
        type: base + 'digest-unsupported-algorithms',
        title: 'Unsupported Hashing Algorithms',
        ...notListedDetail(notListed),
        unsupported_algorithms: list.map(({ algorithm, header }) => ({ algorithm, header }))
      }, unsupportedAlgorithmsSchema, unsupportedHeaders(settings, findings as readonly UnsupportedAlgorithm[], list))
    }
    case 'invalid':
      return new DigestProblem(base + 'digest-invalid-values', `Invalid Digest Values: ${message}`, {
        type: base + 'digest-invalid-values',
        title: 'Invalid Digest Values',
        ...notListedDetail(notListed),
        invalid_digests: (listed as readonly InvalidValue[])
          .map(({ algorithm, header, reason }) => ({ algorithm, header, reason: `digest value ${reason}` }))
      }, invalidValuesSchema)
    case 'mismatched':
      return new DigestProblem(base + 'digest-mismatched-values', `Mismatched Digest Values: ${message}`, {
        type: base + 'digest-mismatched-values',
        title: 'Mismatched Digest Values',
        ...notListedDetail(notListed),
        mismatched_digests: (listed as readonly MismatchedValue[])
          .map(({ algorithm, header, provided }) => ({
            algorithm,
            provided_digest: serializeByteSequence(provided),
            header
          }))
      }, mismatchedValuesSchema)
  }
}

/**
 * The problem that answers `findings`, which are all of one kind (or one general finding), in the
 * shape the route sends. Disclosure applies here and only here: problem-types section 7 lets a
 * server prefer a general problem, since detail reveals intermediaries and fingerprints the
 * implementation, so `none` answers every failure with a bare about:blank of its status. The log
 * keeps what was found, bounded like the documents.
 */
export function problemFor (settings: Settings, findings: readonly Finding[]): DigestProblem {
  const first = findings[0] as Finding
  if (first.kind === 'upload-length') return inconsistentUploadLength(settings, first.detail)
  const digestFindings = first.kind === 'general' ? [] : findings as readonly DigestFinding[]
  const listed = digestFindings.filter(isListable).slice(0, maxListed)
  const problem = first.kind === 'general'
    ? general(settings, first)
    : settings.problemTypes === 'registered' ? registered(settings, digestFindings, listed) : draft00(settings, first)
  // Under `none` even the error's message is the status phrase: routes the plugin never saw
  // declared leave the error to the application's handler, which may send it.
  const status = problem.statusCode
  const phrase = statusPhrases[status] as string
  const answer = settings.disclosure === 'none'
    ? new DigestProblem(problem.type, phrase, { type: 'about:blank', title: phrase }, generalProblemSchema, {}, status)
    : problem
  answer.code = first.kind === 'general' || settings.disclosure === 'none'
    ? problemCodes[status as 400 | 413]
    : problemCodes[first.kind]
  answer.logMessage = problem.message
  answer.logLevel = settings.problemLogLevel
  answer.found = listed.map((finding) => ({ field: finding.header, algorithm: finding.algorithm }))
  answer.notListed = digestFindings.length - listed.length
  return keepingItsFields(answer)
}
