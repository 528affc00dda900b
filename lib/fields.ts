import type { IncomingHttpHeaders } from 'node:http'
import { isInnerList, parseDictionary, type Dictionary, type InnerList, type Item } from 'structured-headers'
import type { DigestFieldName } from '../types/index.js'
import type { Algorithm } from './algorithms.js'
import type { Settings } from './options.js'
import {
  invalidValue,
  malformedField,
  malformedPreference,
  unsupportedAlgorithm,
  type FieldName
} from './problems.js'

/** One digest value from an integrity field that the received content must match. */
export interface Expectation {
  readonly field: DigestFieldName
  readonly algorithm: Algorithm
  readonly value: Buffer
}

/** What the content must match, and the distinct algorithms to hash it with, each once. */
export interface Inspection {
  readonly expectations: readonly Expectation[]
  readonly algorithms: readonly Algorithm[]
}

interface Field {
  readonly name: FieldName
  readonly header: string
  /** The integrity field name, or null for a preference field. */
  readonly integrity: DigestFieldName | null
}

// Every field is parsed before any is judged, so that a field that does not parse is always answered
// as such (problem-types section 4.2), whatever another field holds.
const fields: readonly Field[] = [
  { name: 'Content-Digest', header: 'content-digest', integrity: 'content-digest' },
  { name: 'Repr-Digest', header: 'repr-digest', integrity: 'repr-digest' },
  { name: 'Want-Content-Digest', header: 'want-content-digest', integrity: null },
  { name: 'Want-Repr-Digest', header: 'want-repr-digest', integrity: null }
]

/** True when the request carries none of the four fields: the cheap test every request pays. */
export function hasNoDigestFields (headers: IncomingHttpHeaders): boolean {
  return headers['content-digest'] === undefined &&
    headers['repr-digest'] === undefined &&
    headers['want-content-digest'] === undefined &&
    headers['want-repr-digest'] === undefined
}

function parse (settings: Settings, field: Field, value: string | string[]): Dictionary {
  try {
    // Field lines of one name are one field, joined with commas (RFC 9110 section 5.3): Node and
    // light-my-request join them already, and String() joins any list that still gets here.
    return parseDictionary(String(value))
  } catch (error) {
    throw malformedField(settings, field.name, (error as Error).message)
  }
}

/** The keys a field asks for: every key of an integrity field, keys with a preference above 0 in a preference field. */
function requestedKeys (settings: Settings, field: Field, dictionary: Dictionary): string[] {
  if (field.integrity !== null) return [...dictionary.keys()]
  const keys: string[] = []
  for (const [key, member] of dictionary) {
    const weight = member[0]
    if (isInnerList(member) || typeof weight !== 'number' || !Number.isInteger(weight) || weight < 0 || weight > 10) {
      throw malformedPreference(settings, field.name, key)
    }
    // RFC 9530 section 4: 0 means "not acceptable", so a 0 asks for nothing and cannot be unsupported.
    if (weight > 0) keys.push(key)
  }
  return keys
}

function checkSupported (settings: Settings, field: Field, keys: readonly string[]): void {
  const unsupported = keys.find(key => !settings.algorithms.has(key))
  if (unsupported === undefined) return
  // By default a field is acceptable while it names one algorithm the route supports, which is
  // what lets a client offer several digests at once (RFC 9530 section 2).
  if (settings.strictAlgorithms || !keys.some(key => settings.algorithms.has(key))) {
    throw unsupportedAlgorithm(settings, field.name, unsupported)
  }
}

function digestValue (settings: Settings, algorithm: Algorithm, member: Item | InnerList): Buffer {
  const bytes = member[0]
  if (isInnerList(member) || !(bytes instanceof ArrayBuffer)) {
    throw invalidValue(settings, `digest value for ${algorithm.key} is not a byte sequence`)
  }
  // Problem-types section 4.2: a value of the wrong length cannot come from the algorithm, so the
  // body need not be hashed to know it is wrong.
  if (bytes.byteLength !== algorithm.length) {
    throw invalidValue(settings, `digest value for ${algorithm.key} is not ${algorithm.length} bytes long`)
  }
  return Buffer.from(bytes)
}

/**
 * Parses and judges the request's digest fields before any byte of the body is read. Returns the
 * values to check against the content, and throws the DigestProblem that answers a bad field.
 * `partial` is set for a request with Content-Range, whose Repr-Digest describes the whole
 * representation and so cannot be checked against this request's bytes (RFC 9530 section 3).
 */
export function inspectFields (headers: IncomingHttpHeaders, settings: Settings, partial: boolean): Inspection {
  const present: Array<[Field, Dictionary]> = []
  for (const field of fields) {
    const value = headers[field.header]
    if (value !== undefined) present.push([field, parse(settings, field, value)])
  }
  for (const [field, dictionary] of present) checkSupported(settings, field, requestedKeys(settings, field, dictionary))
  const expectations: Expectation[] = []
  const algorithms: Algorithm[] = []
  for (const [{ integrity }, dictionary] of present) {
    if (integrity === null) continue
    for (const [key, member] of dictionary) {
      const algorithm = settings.algorithms.get(key)
      if (algorithm === undefined) continue
      const value = digestValue(settings, algorithm, member)
      if (partial && integrity === 'repr-digest') continue
      expectations.push({ field: integrity, algorithm, value })
      if (!algorithms.includes(algorithm)) algorithms.push(algorithm)
    }
  }
  return { expectations, algorithms }
}
