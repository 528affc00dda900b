import { PassThrough } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import t from 'tap'
import Fastify from 'fastify'
import { request } from 'undici'
import fastifyDigestFields from '../../lib/index.js'
import { fuzzSeed, listen, member, seededBytes, watchProcess } from '../helpers.js'

// What the attack on issue 25 found of resumable uploads' stored states, pinned: a state that does
// not read is refused rather than crashing the process, and a failed completion stores nothing new.

t.comment(`seed ${fuzzSeed}`)

t.test('a bad stored resumable state is refused, where it crashed the process', async (t) => {
  const escaped = watchProcess(t)
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(fastifyDigestFields)
  app.addContentTypeParser('*', (_request, _payload, done) => done(null))
  let stored = ''
  app.post('/', { config: { digest: { resumable: { creation: true } } } }, async (request) => {
    await pipeline(request.raw, new PassThrough().resume())
    stored = request.resumableUpload?.state() ?? ''
    return {}
  })
  app.patch('/', { config: { digest: { resumable: { loadState: () => stored } } } }, async () => ({}))
  const port = await listen(app)
  const first = Buffer.from('0123456789')
  const whole = Buffer.concat([first, Buffer.from('abcdef')])
  const created = await request(`http://127.0.0.1:${port}/`, {
    method: 'POST', body: first, headers: { 'upload-complete': '?0', 'repr-digest': `${member('sha-256', whole)}, ${member('sha-512', whole)}` }
  })
  t.equal(created.statusCode, 200)
  await created.body.dump()
  const state = JSON.parse(stored)
  const damaged = (change: (hashes: Record<string, Buffer>, expected: Record<string, string>) => void): string => {
    const hashes = Object.fromEntries(Object.entries(state.hashes as Record<string, string>).map(([key, value]) => [key, Buffer.from(value, 'base64')]))
    const expected = { ...state.expected }
    change(hashes, expected)
    return JSON.stringify({ ...state, expected, hashes: Object.fromEntries(Object.entries(hashes).map(([key, value]) => [key, value.toString('base64')])) })
  }
  const cases: Array<[string, string]> = [
    ['an expected digest cut short', damaged((_hashes, expected) => { expected['sha-256'] = expected['sha-256']?.slice(0, 20) as string })],
    ['a sha-256 digest length of 2^32 - 1', damaged((hashes) => { hashes['sha-256']?.writeUInt32LE(0xffffffff, 108) })],
    ['a sha-512 digest length of 300', damaged((hashes) => { hashes['sha-512']?.writeUInt32LE(300, 204) })]
  ]
  for (const [what, bad] of cases) {
    stored = bad
    const append = await request(`http://127.0.0.1:${port}/`, {
      method: 'PATCH',
      body: 'abcdef',
      headers: { 'content-type': 'application/partial-upload', 'upload-offset': '10', 'upload-complete': '?1' }
    })
    t.equal(append.statusCode, 400, what)
    t.match(await append.body.json(), { detail: 'the upload cannot be resumed: the state stored with it does not read' })
  }
  t.same(escaped, [], 'the process lives')
})

t.test('after a failed completion state() is the state the request started from, and a completed upload takes no append', async (t) => {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(fastifyDigestFields)
  app.addContentTypeParser('*', (_request, _payload, done) => done(null))
  let stored = ''
  let after: string | null = null
  const handler = async (request: import('fastify').FastifyRequest): Promise<object> => {
    try {
      await pipeline(request.raw, new PassThrough().resume())
      stored = request.resumableUpload?.state() ?? ''
    } finally {
      after = request.resumableUpload?.state() ?? null
    }
    return {}
  }
  app.post('/', { config: { digest: { resumable: { creation: true } } } }, handler)
  app.patch('/', { config: { digest: { resumable: { loadState: () => stored } } } }, handler)
  const whole = seededBytes(64, fuzzSeed + 6)
  const append = async (body: Buffer, offset: number): Promise<number> => (await app.inject({
    method: 'PATCH',
    url: '/',
    payload: body,
    headers: { 'content-type': 'application/partial-upload', 'upload-offset': String(offset), 'upload-complete': '?1' }
  })).statusCode
  t.equal((await app.inject({ method: 'POST', url: '/', payload: whole.subarray(0, 10), headers: { 'upload-complete': '?0', 'repr-digest': member('sha-256', whole) } })).statusCode, 200)
  const started = stored
  const flipped = Buffer.from(whole.subarray(10))
  flipped.writeUInt8(flipped.readUInt8(5) ^ 1, 5)
  t.equal(await append(flipped, 10), 400)
  t.same(JSON.parse(String(after)), { ...JSON.parse(String(started)), length: 64 },
    'the state the request started from, not one covering the refused bytes, with the length the request made known')
  t.equal(JSON.parse(String(after)).offset, 10)
  t.equal(await append(whole.subarray(10), 10), 200, 'the upload completes with the right bytes')
  t.equal(JSON.parse(stored).complete, true, 'its state says it is complete')
  t.equal(await append(Buffer.from('more'), 64), 400, 'an append to the completed upload is refused')
  t.equal(JSON.parse(stored).offset, 64, 'and the upload is unchanged')
})

// The attack on the fixes above found these, pinned here too.
