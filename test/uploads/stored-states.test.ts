// Issue 25: random corruptions of valid resumable upload states. Each is refused before the append's
// content (the state does not read), or fails the upload when it completes (its digest does not
// match), or changed nothing that matters, and then the upload's digests are those node:crypto
// computes over the whole upload. Never an uncaught exception, never a 5xx.
import { createHash } from 'node:crypto'
import { PassThrough } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import t from 'tap'
import Fastify from 'fastify'
import fastifyDigestFields from '../../lib/index.js'
import { fuzzScale, fuzzSeed, seededBytes, seededRandom, watchProcess } from '../helpers.js'

t.comment(`seed ${fuzzSeed}`)

const algorithms = { 'sha-256': 'sha256', 'sha-512': 'sha512', md5: 'md5', sha: 'sha1' } as const
const reprDigest = (data: Buffer): string => Object.entries(algorithms)
  .map(([key, name]) => `${key}=:${createHash(name).update(data).digest('base64')}:`).join(', ')

t.test('random corruptions of stored states are refused, fail the upload, or change nothing that matters', async (t) => {
  const escaped = watchProcess(t)
  const random = seededRandom(fuzzSeed)
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)] as T
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(fastifyDigestFields, { algorithms: ['sha-256', 'sha-512', 'md5', 'sha'] })
  app.addContentTypeParser('*', (_request, _payload, done) => done(null))
  let stored = ''
  let digests: Record<string, string> = {}
  const handler = async (request: import('fastify').FastifyRequest): Promise<object> => {
    await pipeline(request.raw, new PassThrough().resume())
    stored = request.resumableUpload?.state() ?? ''
    digests = Object.fromEntries(Object.entries(request.resumableUpload?.digests() ?? {}).map(([key, value]) => [key, value.toString('base64')]))
    return {}
  }
  app.post('/', { config: { digest: { resumable: { creation: true } } } }, handler)
  app.patch('/', { config: { digest: { resumable: { loadState: () => stored } } } }, handler)

  // Each corruption changes one thing of the JSON, of a hash state or of an expected digest.
  const corruptBytes = (bytes: Buffer): Buffer => {
    const copy = Buffer.from(bytes)
    const at = Math.floor(random() * Math.max(1, copy.length - 3))
    switch (pick(['bit', 'byte', 'word', 'ones', 'cut', 'grow'])) {
      case 'bit': copy.writeUInt8(copy.readUInt8(at) ^ (1 << Math.floor(random() * 8)), at); return copy
      case 'byte': copy.writeUInt8(Math.floor(random() * 256), at); return copy
      case 'word': copy.writeUInt32LE(Math.floor(random() * 2 ** 32), at); return copy
      case 'ones': copy.writeUInt32LE(0xffffffff, at); return copy
      case 'cut': return copy.subarray(0, at)
      default: return Buffer.concat([copy, Buffer.alloc(1 + at % 8)])
    }
  }
  const corrupt = (text: string): { kind: string, text: string } => {
    const state = JSON.parse(text)
    const kind = pick(['hash', 'hash', 'hash', 'expected', 'offset', 'json', 'member'])
    if (kind === 'hash' || kind === 'expected') {
      const record = kind === 'hash' ? state.hashes : state.expected
      const key = pick(Object.keys(record))
      record[key] = corruptBytes(Buffer.from(record[key], 'base64')).toString('base64')
    } else if (kind === 'offset') {
      state.offset += pick([-1, 1, 64, -state.offset, 2 ** 40, 0.5])
    } else if (kind === 'member') {
      state[pick(['v', 'offset', 'want', 'expected', 'hashes', 'complete'])] = pick([null, 'x', 7, [], {}, true, false])
    } else {
      const at = Math.floor(random() * text.length)
      return { kind, text: text.slice(0, at) + String.fromCharCode(32 + Math.floor(random() * 95)) + text.slice(at + 1) }
    }
    return { kind, text: JSON.stringify(state) }
  }

  const outcomes: Record<string, number> = {}
  const cases = Math.round(600 * fuzzScale)
  for (let i = 0; i < cases; i++) {
    const whole = seededBytes(1 + Math.floor(random() * 3000), fuzzSeed + i)
    const cut = Math.floor(random() * whole.length)
    const created = await app.inject({ method: 'POST', url: '/', payload: whole.subarray(0, cut), headers: { 'upload-complete': '?0', 'repr-digest': reprDigest(whole) } })
    t.equal(created.statusCode, 200)
    const { kind, text } = corrupt(stored)
    stored = text
    digests = {}
    const append = await app.inject({
      method: 'PATCH',
      url: '/',
      payload: whole.subarray(cut),
      headers: { 'content-type': 'application/partial-upload', 'upload-offset': String(cut), 'upload-complete': '?1' }
    })
    const detail = append.statusCode === 200 ? 'completed' : String(append.json().detail ?? append.json().type)
    const outcome = `${append.statusCode} ${/cannot be resumed/.test(detail) ? 'unreadable' : /mismatch/.test(detail) ? 'mismatch' : detail}`
    outcomes[`${kind}: ${outcome}`] = (outcomes[`${kind}: ${outcome}`] ?? 0) + 1
    if (![200, 400, 409].includes(append.statusCode)) t.fail(`case ${i} (${kind}): ${append.statusCode} ${append.body}`)
    if (append.statusCode === 200) {
      const expected = Object.fromEntries(Object.entries(algorithms).map(([key, name]) => [key, createHash(name).update(whole).digest('base64')]))
      if (JSON.stringify(digests) !== JSON.stringify(expected)) t.fail(`case ${i} (${kind}): completed with digests that are not the upload's`)
    }
  }
  t.comment(JSON.stringify(outcomes, null, 1))
  const refused = Object.entries(outcomes).filter(([key]) => / unreadable$/.test(key)).reduce((sum, [, n]) => sum + n, 0)
  t.ok(refused > cases / 3, `most corruptions are refused before the content (${refused} of ${cases})`)
  t.same(escaped, [], 'the process lives')
})
