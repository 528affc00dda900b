import { createHash } from 'node:crypto'
import t from 'tap'
import fc from 'fast-check'
import { parseDictionary } from 'structured-headers'
import type { FastifyInstance, LightMyRequestResponse } from 'fastify'
import { buildApp, fuzzScale, hello, json, problemTypes, type Tap } from './helpers.js'

// Property-based: whatever the four fields hold, a request gets the route's success or a 400
// problem document, never anything else. DIGEST_FUZZ_SCALE multiplies the number of cases.
const runs = (n: number): number => Math.max(1, Math.round(n * fuzzScale))

const fieldNames = ['content-digest', 'repr-digest', 'want-content-digest', 'want-repr-digest'] as const
const displayNames = ['Content-Digest', 'Repr-Digest', 'Want-Content-Digest', 'Want-Repr-Digest']
const helloDigests = {
  'sha-256': createHash('sha256').update(hello).digest(),
  'sha-512': createHash('sha512').update(hello).digest()
}
const emptyDigests = {
  'sha-256': createHash('sha256').digest(),
  'sha-512': createHash('sha512').digest()
}

type Fields = Partial<Record<typeof fieldNames[number], string>>
interface Case { fields: Fields, content: boolean }

// Structured-field shaped members, mostly well formed so that every later check is reached, and
// subtly broken now and then.
const supportedKey = fc.constantFrom('sha-256', 'sha-512')
const otherKey = fc.oneof(
  fc.constantFrom('md5', 'sha', 'unixsum', 'crc32c', 'foo', '*sha'),
  fc.stringMatching(/^[a-z*][a-z0-9_.*-]{0,12}$/),
  fc.integer({ min: 100, max: 5000 }).map((n) => 'k'.repeat(n))
)
const key = fc.oneof({ weight: 5, arbitrary: supportedKey }, { weight: 2, arbitrary: otherKey })
const base64Of = (length: fc.Arbitrary<number>): fc.Arbitrary<string> =>
  length.chain((n) => fc.uint8Array({ minLength: n, maxLength: n })).map((array) => Buffer.from(array).toString('base64'))
// The digest of either body a case may send, so that about half of the correct values match.
const digestOf = (k: 'sha-256' | 'sha-512', empty = false): string => (empty ? emptyDigests : helloDigests)[k].toString('base64')
const integrityMember = fc.tuple(key, fc.oneof(
  { weight: 4, arbitrary: fc.constant('correct') },
  { weight: 3, arbitrary: fc.constant('right length') },
  { weight: 2, arbitrary: fc.constant('wrong length') },
  { weight: 1, arbitrary: fc.constant('unpadded') },
  { weight: 1, arbitrary: fc.constantFrom('1', 'token', '"text"', '?1', '(:AAAA:)', '') }
), base64Of(fc.integer({ min: 0, max: 80 })), fc.boolean()).map(([k, kind, random, empty]) => {
  if (k !== 'sha-256' && k !== 'sha-512') return `${k}=:${random}:`
  const length = k === 'sha-512' ? 64 : 32
  switch (kind) {
    case 'correct': return `${k}=:${digestOf(k, empty)}:`
    case 'unpadded': return `${k}=:${digestOf(k, empty).replace(/=+$/, '')}:`
    case 'right length': return `${k}=:${Buffer.from(random + 'x'.repeat(length)).subarray(0, length).toString('base64')}:`
    case 'wrong length': return `${k}=:${random}:`
    default: return kind === '' ? k : `${k}=${kind}`
  }
})
const preferenceMember = fc.tuple(key, fc.oneof(
  { weight: 8, arbitrary: fc.integer({ min: 0, max: 10 }).map(String) },
  { weight: 1, arbitrary: fc.integer({ min: -1000, max: 1000 }).map(String) },
  { weight: 1, arbitrary: fc.constantFrom('1.5', ':AAAA:', '(1 2)', '?1', '"5"') }
)).map(([k, v]) => `${k}=${v}`)
const brokenMember = fc.oneof(
  supportedKey.map((k) => `${k}=:${digestOf(k)}`),
  supportedKey.map((k) => `${k}=:${digestOf(k).slice(1)}:`),
  supportedKey.map((k) => `${k}=:${digestOf(k)}!:`),
  supportedKey.map((k) => `${k.toUpperCase()}=:${digestOf(k)}:`),
  fc.constantFrom('=1', 'sha-256=1,', ',sha-256=1', 'sha-256=é', 'sha-256==1', 'sha-256=1 sha-512=2')
)
const parameters = fc.array(fc.tuple(fc.stringMatching(/^[a-z][a-z0-9]{0,4}$/), fc.constantFrom('', '=1', '="x"', '=?0', '=:AAAA:')), { maxLength: 2 })
  .map((list) => list.map(([name, v]) => `;${name}${v}`).join(''))
const separator = fc.constantFrom(', ', ',', ' , ', ',\t', ' ,')
const nonAscii = fc.string({ unit: 'grapheme', maxLength: 40 })
const anyText = fc.oneof(fc.string({ maxLength: 60 }), fc.string({ unit: 'binary-ascii', maxLength: 60 }), nonAscii)

function dictionaryOf (member: fc.Arbitrary<string>): fc.Arbitrary<string> {
  const withParameters = fc.tuple(member, fc.oneof({ weight: 4, arbitrary: fc.constant('') }, { weight: 1, arbitrary: parameters }))
    .map(([text, params]) => text + params)
  const shaped = fc.tuple(fc.array(withParameters, { minLength: 1, maxLength: 4 }), separator).map(([members, sep]) => members.join(sep))
  return fc.oneof({ weight: 20, arbitrary: shaped }, { weight: 1, arbitrary: brokenMember }, { weight: 1, arbitrary: anyText })
}

type FieldName = typeof fieldNames[number]
function fieldsOf (integrity: fc.Arbitrary<string>, preference: fc.Arbitrary<string>): fc.Arbitrary<Fields> {
  // Each field is present about a third of the time, so that most requests carry one or two.
  const sometimes = (text: fc.Arbitrary<string>): fc.Arbitrary<string | undefined> =>
    fc.oneof({ weight: 2, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: text })
  return fc.record({
    'content-digest': sometimes(integrity),
    'repr-digest': sometimes(integrity),
    'want-content-digest': sometimes(preference),
    'want-repr-digest': sometimes(preference)
  }).map((record) => Object.fromEntries(Object.entries(record).filter(([, v]) => v !== undefined)) as Partial<Record<FieldName, string>>)
}

const cases = fc.record({ fields: fieldsOf(dictionaryOf(integrityMember), dictionaryOf(preferenceMember)), content: fc.boolean() })
const randomCases = fc.record({ fields: fieldsOf(anyText, anyText), content: fc.boolean() })

function parses (text: string): boolean {
  try {
    parseDictionary(text)
    return true
  } catch {
    return false
  }
}

interface Checked { tried: number }

/** Outcomes seen, by status and problem type, so that a generator that stops reaching one shows. */
const outcomes = new Map<string, number>()
function tally (outcome: string): void { outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1) }

/** POSTs a case: the 18-byte example body with its fields, or the fields alone and no content. */
function send (app: FastifyInstance, { fields, content }: Case): Promise<LightMyRequestResponse> {
  return app.inject({ method: 'POST', url: '/', ...(content ? { payload: hello, headers: { ...json, ...fields } } : { headers: fields }) })
}

async function judge (app: FastifyInstance, calls: { handler: number }, { fields, content }: Case): Promise<void> {
  const before = calls.handler
  const response = await send(app, { fields, content })
  const expected = content ? helloDigests : emptyDigests
  if (response.statusCode === 200) {
    // Success only when every supported value that was compared matched the content.
    for (const name of ['content-digest', 'repr-digest'] as const) {
      const text = fields[name]
      if (text === undefined) continue
      for (const [k, member] of parseDictionary(text)) {
        if (k !== 'sha-256' && k !== 'sha-512') continue
        if (!Buffer.from(member[0] as ArrayBuffer).equals(expected[k])) throw new Error(`accepted a wrong ${k} value in ${name}`)
      }
    }
    if (calls.handler !== before + 1) throw new Error('a success without the handler')
    tally('200')
    return
  }
  if (response.statusCode !== 400) throw new Error(`status ${response.statusCode}: ${response.body}`)
  if (response.headers['content-type'] !== 'application/problem+json') throw new Error(`content-type ${response.headers['content-type']}`)
  if (calls.handler !== before) throw new Error('the handler ran on a refused request')
  const problem = response.json()
  tally(problem.type.replace(problemTypes, ''))
  const unparsable = fieldNames.findIndex((name) => fields[name] !== undefined && !parses(fields[name]))
  if (unparsable !== -1) {
    // Problem-types section 4.2: digest-invalid-value MUST NOT answer a field that does not parse.
    if (problem.type !== 'about:blank' || !problem.detail.startsWith(`${displayNames[unparsable]} is not a valid structured-field dictionary`)) {
      throw new Error(`unparsable ${displayNames[unparsable]} answered with ${response.body}`)
    }
    return
  }
  const types = ['about:blank', 'digest-unsupported-algorithm', 'digest-invalid-value', 'digest-mismatching-value']
  if (!types.some((type) => problem.type === type || problem.type === problemTypes + type)) throw new Error(`type ${problem.type}`)
  if (problem.type === problemTypes + 'digest-mismatching-value') {
    const algorithm = problem.algorithm as 'sha-256' | 'sha-512'
    if (problem['calculated-digest'] !== `:${expected[algorithm].toString('base64')}:`) throw new Error('wrong calculated digest')
    if (problem['provided-digest'] === problem['calculated-digest']) throw new Error('a mismatch of equal digests')
  }
}

async function property (t: Tap, name: string, arbitrary: fc.Arbitrary<Case>, numRuns: number, checked: Checked): Promise<void> {
  const { app, calls } = await buildApp()
  await app.ready()
  await fc.assert(fc.asyncProperty(arbitrary, async (c) => {
    checked.tried++
    await judge(app, calls, c)
  }), { numRuns })
  t.pass(`${name}: ${numRuns} cases`)
}

const checked = { tried: 0 }
const unhandled: unknown[] = []
const onUnhandled = (reason: unknown): void => { unhandled.push(reason) }
process.on('unhandledRejection', onUnhandled)

t.test('structured-field shaped fields, valid and broken, with and without content', (t) => property(t, 'dictionaries', cases, runs(6000), checked))

t.test('random text and bytes in every field, with and without content', (t) => property(t, 'random text', randomCases, runs(3000), checked))

t.test('thousands of members and duplicate keys', (t) => {
  const many = fc.record({
    fields: fc.record({
      'content-digest': fc.tuple(fc.integer({ min: 1000, max: 4000 }), fc.constantFrom('sha-256', 'foo', 'md5'))
        .map(([n, k]) => Array.from({ length: n }, (_, i) => `${k}${k === 'sha-256' ? '' : i}=:${helloDigests['sha-256'].toString('base64')}:`).join(', ')),
      'want-repr-digest': fc.integer({ min: 1000, max: 4000 }).map((n) => Array.from({ length: n }, (_, i) => `k${i}=${i % 11}`).join(', '))
    }, { requiredKeys: [] }),
    content: fc.constant(true)
  })
  return property(t, 'many members', many, runs(200), checked)
})

t.test('with disclosure none, no response reveals an algorithm, a value or the failed check', async (t) => {
  const { app } = await buildApp({ disclosure: 'none', required: true })
  await app.ready()
  await fc.assert(fc.asyncProperty(fc.oneof(cases, randomCases), async ({ fields, content }) => {
    checked.tried++
    const response = await send(app, { fields, content })
    if (response.statusCode === 200) return
    const revealing = Object.keys(response.headers).filter((header) => header.includes('digest'))
    if (response.statusCode !== 400 || response.body !== '{"type":"about:blank","title":"Bad Request"}' || revealing.length > 0) {
      throw new Error(`${response.statusCode} ${revealing.join(',')} ${response.body}`)
    }
  }), { numRuns: runs(1000) })
  t.pass(`disclosure none: ${runs(1000)} cases`)
})

t.test('no unhandled rejection escaped', async (t) => {
  process.off('unhandledRejection', onUnhandled)
  t.same(unhandled, [])
  t.ok(checked.tried >= runs(10200), `${checked.tried} generated requests judged`)
  t.comment(`generated requests judged: ${checked.tried}; outcomes: ${JSON.stringify(Object.fromEntries(outcomes))}`)
  for (const outcome of ['200', 'about:blank', 'digest-unsupported-algorithm', 'digest-invalid-value', 'digest-mismatching-value']) {
    t.ok((outcomes.get(outcome) ?? 0) >= 50, `the generators reach ${outcome} (${outcomes.get(outcome) ?? 0} times)`)
  }
})
