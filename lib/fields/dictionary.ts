/**
 * Dictionary fields (RFC 9651 section 4.2.2) as clients write digest fields: members `key=:base64:`
 * and `key=N`, separated by commas. That form is read here in one pass; anything else, valid or
 * not, is read by structured-headers, whose result this one equals on every input it takes, with
 * byte sequences as Buffers (test/fields/dictionary.test.ts checks both over the structured field test
 * corpus and generated fields).
 */
import { parseDictionary as parseAnyDictionary, type BareItem, type InnerList, type Parameters } from 'structured-headers'

const comma = 0x2c
const equals = 0x3d
const colon = 0x3a
const space = 0x20
const tab = 0x09

// RFC 9651 section 3.1.2: a key is lcalpha or "*", then lcalpha, DIGIT, "_", "-", "." or "*".
function isKeyStart (code: number): boolean {
  return (code >= 0x61 && code <= 0x7a) || code === 0x2a
}

function isKeyChar (code: number): boolean {
  return isKeyStart(code) || (code >= 0x30 && code <= 0x39) || code === 0x5f || code === 0x2d || code === 0x2e
}

function isBase64Char (code: number): boolean {
  return (code >= 0x41 && code <= 0x5a) || (code >= 0x61 && code <= 0x7a) || (code >= 0x30 && code <= 0x39) ||
    code === 0x2b || code === 0x2f
}

/**
 * The bytes of canonical base64 from `start` to `end` (a multiple of four characters, "=" only as
 * the last one or two), or null for anything else.
 */
export function canonicalBytes (text: string, start: number, end: number): Buffer | null {
  const length = end - start
  if (length % 4 !== 0) return null
  let padding = 0
  if (length > 0 && text.charCodeAt(end - 1) === equals) padding = text.charCodeAt(end - 2) === equals ? 2 : 1
  for (let i = start; i < end - padding; i++) if (!isBase64Char(text.charCodeAt(i))) return null
  // A view of Node's shared pool, like any small Buffer.from(): an ArrayBuffer of its own costs
  // more than the rest of the parse together.
  return Buffer.from(text.slice(start, end), 'base64')
}

/** A Dictionary as read here: its byte sequences are Buffers, where structured-headers gives ArrayBuffers. */
export type Member = [BareItem | Buffer, Parameters] | InnerList
export type Members = Map<string, Member>

/** The members of a field in the form above, or null when the field is in any other. */
function parseCanonical (text: string): Members | null {
  const dictionary: Members = new Map()
  const end = text.length
  let at = 0
  while (true) {
    const keyStart = at
    if (!isKeyStart(text.charCodeAt(at))) return null
    while (isKeyChar(text.charCodeAt(++at)));
    const key = text.slice(keyStart, at)
    if (text.charCodeAt(at++) !== equals) return null
    const first = text.charCodeAt(at)
    if (first === colon) {
      const close = text.indexOf(':', at + 1)
      if (close === -1) return null
      const bytes = canonicalBytes(text, at + 1, close)
      if (bytes === null) return null
      dictionary.set(key, [bytes, new Map()])
      at = close + 1
    } else {
      // An Integer of 1 to 15 digits, not the start of a Decimal.
      const digits = at
      while (text.charCodeAt(at) >= 0x30 && text.charCodeAt(at) <= 0x39) at++
      if (at === digits || at - digits > 15 || text.charCodeAt(at) === 0x2e) return null
      dictionary.set(key, [Number(text.slice(digits, at)), new Map()])
    }
    while (text.charCodeAt(at) === space || text.charCodeAt(at) === tab) at++
    if (at === end) return dictionary
    if (text.charCodeAt(at++) !== comma) return null
    while (text.charCodeAt(at) === space || text.charCodeAt(at) === tab) at++
  }
}

/** The same members, byte sequences as Buffers (views of the same memory). */
function withBuffers (dictionary: Map<string, [BareItem, Parameters] | InnerList>): Members {
  const members: Members = dictionary
  for (const [key, [value, parameters]] of dictionary) {
    if (value instanceof ArrayBuffer) members.set(key, [Buffer.from(value), parameters as Parameters])
  }
  return members
}

/** Parses a Dictionary field, throwing structured-headers' ParseError, which says where it broke. */
export function parseDictionary (text: string): Members {
  return parseCanonical(text) ?? withBuffers(parseAnyDictionary(text))
}
