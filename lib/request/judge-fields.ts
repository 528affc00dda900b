/** The digest fields of a header or trailer section, parsed and judged before any content is read. */
import type { IncomingHttpHeaders } from 'node:http'
import { isInnerList } from 'structured-headers'
import { parseDictionary, type Member, type Members } from '../fields/dictionary.js'
import type { DigestFieldName } from '../types.js'
import type { Algorithm } from '../fields/algorithms.js'
import {
  refusals,
  type FieldName,
  type Finding,
  type IntegrityFieldName,
  type InvalidValue,
  type UnsupportedAlgorithm
} from '../findings.js'
import { isIntegrityField, listMembers, type Section } from '../fields/sections.js'
import type { Settings } from '../options/settings.js'

/** One digest value from an integrity field that the received content must match. */
export interface Expectation {
  readonly field: DigestFieldName
  readonly header: IntegrityFieldName
  readonly algorithm: Algorithm
  readonly value: Buffer
}

/**
 * The judgement of a request's fields before any content is read: the findings of the kind that
 * answers the request (empty when every field is acceptable), and the values its content must
 * match.
 */
export interface Judgement {
  readonly findings: readonly Finding[]
  readonly expectations: readonly Expectation[]
}

interface Field {
  readonly name: FieldName
  readonly header: string
  /** The integrity field name, or null for a preference field. */
  readonly integrity: DigestFieldName | null
}

// Every field is parsed before any is judged, so that a field that does not parse is always answered
// as such (problem-types section 4.2), whatever another field holds. The order is the order in
// which the first problem of a kind is reported.
const fields: readonly Field[] = [
  { name: 'Content-Digest', header: 'content-digest', integrity: 'content-digest' },
  { name: 'Repr-Digest', header: 'repr-digest', integrity: 'repr-digest' },
  { name: 'Unencoded-Digest', header: 'unencoded-digest', integrity: 'unencoded-digest' },
  { name: 'Want-Content-Digest', header: 'want-content-digest', integrity: null },
  { name: 'Want-Repr-Digest', header: 'want-repr-digest', integrity: null },
  { name: 'Want-Unencoded-Digest', header: 'want-unencoded-digest', integrity: null }
]

/**
 * Which of the six fields a request carries: none (nor a Trailer field, which can announce some),
 * one integrity field of the content (Content-Digest or Repr-Digest) alone, or any others.
 */
export function digestFieldsOf (headers: IncomingHttpHeaders): 'none' | 'one' | 'others' {
  if (headers['unencoded-digest'] !== undefined ||
    headers['want-content-digest'] !== undefined ||
    headers['want-repr-digest'] !== undefined ||
    headers['want-unencoded-digest'] !== undefined ||
    headers.trailer !== undefined) return 'others'
  const content = headers['content-digest'] !== undefined
  const repr = headers['repr-digest'] !== undefined
  return content && repr ? 'others' : content || repr ? 'one' : 'none'
}

/** The integrity fields a request announces in its Trailer field (RFC 9110 section 6.6.2). */
export function announcedFields (headers: IncomingHttpHeaders): string[] {
  const trailer = headers.trailer
  if (trailer === undefined) return []
  return listMembers(trailer).filter(isIntegrityField)
}

type Parsed = [Field, Members, string]

function parse (section: Readonly<Record<string, string | string[] | undefined>>): Parsed[] | Finding {
  const present: Parsed[] = []
  for (const field of fields) {
    const value = section[field.header]
    if (value === undefined) continue
    try {
      // Field lines of one name are one field, joined with commas (RFC 9110 section 5.3): Node and
      // light-my-request join them already, and String() joins any list that still gets here.
      const text = String(value)
      present.push([field, parseDictionary(text), text])
    } catch (error) {
      return refusals.notADictionary(field.name, (error as Error).message)
    }
  }
  return present
}

/**
 * The keys a field asks for: every key of an integrity field, keys with a preference above 0 in a
 * preference field; or the finding of a preference that is not an integer from 0 to 10 (RFC 9530
 * section 4).
 */
function requestedKeys ({ name, integrity }: Field, dictionary: Members, text: string): string[] | Finding {
  if (integrity !== null) return [...dictionary.keys()]
  const keys: string[] = []
  // Only a field with a point can hold a Decimal.
  const decimals = text.includes('.') ? decimalKeys(text) : noDecimals
  for (const [key, member] of dictionary) {
    const weight = member[0]
    const integer = typeof weight === 'number' && Number.isInteger(weight) && !decimals.has(key)
    if (isInnerList(member) || !integer || weight < 0 || weight > 10) {
      return refusals.badPreference(name, key)
    }
    // RFC 9530 section 4: 0 means "not acceptable", so a 0 asks for nothing and cannot be unsupported.
    if (weight > 0) keys.push(key)
  }
  return keys
}

/**
 * The keys of a preference field whose value is written as a Decimal: structured-headers gives
 * 5.0 as the same number as the Integer 5, but RFC 9530 section 4 asks for an Integer. Read from
 * the field's text in one pass, at each key's last place, whose value counts (RFC 9651 section
 * 4.2.2).
 */
const noDecimals: ReadonlySet<string> = new Set()

function decimalKeys (text: string): Set<string> {
  const last = new Map<string, string>()
  const members = text.matchAll(/(?:^|,)[ \t]*([a-z*][a-z0-9_.*-]*)=([^,;\s]*)/g)
  for (const [, key, value] of members) last.set(key as string, value as string)
  return new Set([...last].filter(([, value]) => /^-?\d+\./.test(value)).map(([key]) => key))
}

function unsupportedKeys (settings: Settings, field: Field, keys: readonly string[]): UnsupportedAlgorithm[] {
  // By default a field is acceptable while it names one algorithm the route supports, which is
  // what lets a client offer several digests at once (RFC 9530 section 2).
  if (!settings.strictAlgorithms && keys.some(key => settings.algorithms.has(key))) return []
  return keys
    .filter((key) => !settings.algorithms.has(key))
    .map((algorithm) => ({ kind: 'unsupported', algorithm, header: field.name }))
}

/** Why a value cannot come from its algorithm (problem-types section 4.2), or null. */
function invalidity (algorithm: Algorithm, member: Member): string | null {
  const bytes = member[0]
  if (isInnerList(member) || !Buffer.isBuffer(bytes)) return 'is not a byte sequence'
  // A value of the wrong length cannot come from the algorithm, so the content need not be hashed
  // to know it is wrong.
  if (bytes.length !== algorithm.length) return `is not ${algorithm.length} bytes long`
  return null
}

/**
 * Parses and judges the digest fields of a header or trailer section. Findings are of one kind,
 * in this order of precedence: a field that is not a dictionary or a preference out of range (the
 * first, as about:blank), then every unsupported key, then every invalid value. `partial` is set
 * for a request with a valid Content-Range, whose Repr-Digest describes the whole representation
 * and so cannot be checked against this request's bytes (RFC 9530 section 3).
 */
export function judgeFields (section: Section, settings: Settings, partial: boolean): Judgement {
  const present = parse(section)
  if (!Array.isArray(present)) return { findings: [present], expectations: [] }
  const unsupported: UnsupportedAlgorithm[] = []
  for (const [field, dictionary, text] of present) {
    const keys = requestedKeys(field, dictionary, text)
    if (!Array.isArray(keys)) return { findings: [keys], expectations: [] }
    unsupported.push(...unsupportedKeys(settings, field, keys))
  }
  if (unsupported.length > 0) return { findings: unsupported, expectations: [] }
  const invalid: InvalidValue[] = []
  const expectations: Expectation[] = []
  for (const [{ name, integrity }, dictionary] of present) {
    if (integrity === null) continue
    for (const [key, member] of dictionary) {
      const algorithm = settings.algorithms.get(key)
      if (algorithm === undefined) continue
      const reason = invalidity(algorithm, member)
      if (reason !== null) {
        invalid.push({ kind: 'invalid', algorithm: key, header: name as IntegrityFieldName, reason })
      } else if (!(partial && integrity === 'repr-digest')) {
        const value = member[0] as Buffer
        expectations.push({ field: integrity, header: name as IntegrityFieldName, algorithm, value })
      }
    }
  }
  return invalid.length > 0 ? { findings: invalid, expectations: [] } : { findings: [], expectations }
}
