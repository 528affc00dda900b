import { readFileSync } from 'node:fs'
import t from 'tap'
import { parseDictionary as reference } from 'structured-headers'
import { fuzzScale, fuzzSeed, seededRandom } from '../helpers.js'

// Issue 20: the plugin reads the usual form of digest fields in one pass (lib/fields/dictionary.ts) and
// leaves every other form to structured-headers. The oracle is structured-headers itself: for
// every input, the plugin's parse gives the same members in the same order, or the same error.
// The inputs are the structured field test corpus (httpwg/structured-field-tests) and generated
// fields close to the usual form, where a slip would hide.

t.comment(`seed ${fuzzSeed}`)

let referenceCalls = 0
const { parseDictionary } = await t.mockImport<typeof import('../../lib/fields/dictionary.js')>('../../lib/fields/dictionary.js', {
  'structured-headers': {
    parseDictionary: (text: string) => {
      referenceCalls++
      return reference(text)
    }
  }
})

/** Byte sequences as hex whatever holds them (an ArrayBuffer or a Buffer), maps as entries. */
function plain (value: unknown): unknown {
  if (value instanceof ArrayBuffer || Buffer.isBuffer(value)) return `bytes:${Buffer.from(value as ArrayBuffer).toString('hex')}`
  if (value instanceof Map) return [...value].map(([key, item]) => [key, plain(item)])
  if (Array.isArray(value)) return value.map(plain)
  return value
}

/** A parse as comparable data: members with their values (bytes as hex), or the error's message. */
function outcome (parse: (text: string) => Map<string, unknown>, text: string): unknown {
  try {
    return [...parse(text)].map(([key, member]) => [key, JSON.stringify(plain(member))])
  } catch (error) {
    return `error: ${(error as Error).message}`
  }
}

function agree (t: Tap, texts: readonly string[]): number {
  let differ = 0
  for (const text of texts) {
    const mine = outcome(parseDictionary as (text: string) => Map<string, unknown>, text)
    const theirs = outcome(reference as (text: string) => Map<string, unknown>, text)
    if (JSON.stringify(mine) !== JSON.stringify(theirs)) {
      differ++
      if (differ <= 5) t.same(mine, theirs, JSON.stringify(text))
    }
  }
  return differ
}
type Tap = Parameters<Parameters<typeof t.test>[0]>[0]

t.test('the structured field test corpus parses as structured-headers parses it', async (t) => {
  const { raws } = JSON.parse(readFileSync(new URL('../fixtures/structured-field-tests/raw-fields.json', import.meta.url), 'utf8')) as { raws: string[] }
  t.ok(raws.length > 1000, `${raws.length} fields`)
  t.equal(agree(t, raws), 0, 'no field parses otherwise')
})

const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/'
const random = seededRandom(fuzzSeed)
const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)] as T

function base64Of (length: number): string {
  return Buffer.from(Array.from({ length }, () => Math.floor(random() * 256))).toString('base64')
}

/** A member in the usual form, or near it: one change in four. */
function member (): string {
  const key = pick(['sha-256', 'sha-512', 'md5', 'sha', 'a', '*x', 'x_y.z-1', 'SHA-256', '1a', 'Ä', ''])
  const value = random() < 0.6
    ? `:${base64Of(pick([0, 1, 2, 3, 16, 20, 32, 64]))}:`
    : String(pick([0, 1, 3, 10, 123456789012345]))
  if (random() < 0.75) return `${key}=${value}`
  const where = Math.floor(random() * (key.length + value.length + 2))
  const whole = `${key}=${value}`
  const change = pick(['drop', 'insert', 'parameter', 'boolean', 'decimal'])
  switch (change) {
    case 'drop': return whole.slice(0, where) + whole.slice(where + 1)
    case 'insert': return whole.slice(0, where) + pick([...alphabet, ':', '=', ' ', '\t', ',', ';', '.', '-', '"', '(', '?', '%']) + whole.slice(where)
    case 'parameter': return `${whole};${pick(['a', 'b=1', 'c=:AA==:', '"x"'])}`
    case 'boolean': return key
    default: return `${key}=${pick(['1.5', '1.', '-1', '12.345', '0.0001', '1234567890123456'])}`
  }
}

t.test('generated fields near the usual form parse as structured-headers parses them', async (t) => {
  const count = 100_000 * fuzzScale
  const texts = Array.from({ length: count }, () => {
    const members = Array.from({ length: 1 + Math.floor(random() * 4) }, member)
    const separator = (): string => pick([', ', ',', ' , ', ',\t', ',  '])
    return members.reduce((text, next) => text + separator() + next) + pick(['', '', '', ' ', ',', '\t'])
  })
  referenceCalls = 0
  t.equal(agree(t, texts), 0, `none of ${count} fields parses otherwise`)
  const read = count - referenceCalls
  t.ok(read > count / 10, `${read} of them read in one pass, the rest by structured-headers`)
})

t.test('the usual form is read without structured-headers; byte sequences are Buffers either way', async (t) => {
  referenceCalls = 0
  const parsed = parseDictionary('sha-256=:AAAAAA==:, sha-512=10,md5=:AQID:')
  t.equal(referenceCalls, 0)
  t.same(parsed.get('sha-256')?.[0], Buffer.from([0, 0, 0, 0]))
  t.same(parsed.get('md5')?.[0], Buffer.from([1, 2, 3]))
  const other = parseDictionary('sha-256=:AAAAAA==:;a=1, b=?1')
  t.equal(referenceCalls, 1, 'a parameter is read by structured-headers')
  t.same(other.get('sha-256'), [Buffer.from([0, 0, 0, 0]), new Map([['a', 1]])])
  t.equal(other.get('b')?.[0], true)
  t.same([...parsed.keys()], ['sha-256', 'sha-512', 'md5'])
  t.equal(parsed.get('sha-512')?.[0], 10)
})
