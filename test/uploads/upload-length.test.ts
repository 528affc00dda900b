// Upload-Length (draft-ietf-httpbis-resumable-upload-15 section 4.1.3): the length declared at
// creation or on an append, and the one a completing request's content gives, must agree; no content
// goes past it. The plugin refuses disagreement in the header section with the draft's
// inconsistent-upload-length problem before any content, and content that goes past the length or
// stops short of it on completion once it ended; it keeps the length in the upload's state. The
// oracle is a small model of the rule, independent of lib/, checked over seeded random sequences.
import { once } from 'node:events'
import { connect } from 'node:net'
import { Readable } from 'node:stream'
import t from 'tap'
import Fastify, { type FastifyInstance, type FastifyRequest } from 'fastify'
import fastifyDigestFields, { uploadFieldsOf, type ResumableUpload } from '../../lib/index.js'
import { fuzzSeed, listen, problemTypes, seededRandom, type Tap } from '../helpers.js'

t.comment(`seed ${fuzzSeed} (DIGEST_FUZZ_SEED replays it)`)

const partial = { 'content-type': 'application/partial-upload' }
const inconsistent = { type: `${problemTypes}inconsistent-upload-length`, title: 'inconsistent length values for upload' }

interface Seen { upload: ResumableUpload, received: number }

async function build (t: Tap): Promise<{ app: FastifyInstance, store: { state: string | null }, seen: Seen[] }> {
  const app = Fastify()
  t.teardown(async () => await app.close())
  await app.register(fastifyDigestFields)
  app.removeAllContentTypeParsers()
  app.addContentTypeParser('*', (_request, _payload, done) => done(null))
  const store: { state: string | null } = { state: null }
  const seen: Seen[] = []
  const handler = async (request: FastifyRequest): Promise<object> => {
    let received = 0
    for await (const chunk of request.raw) received += (chunk as Buffer).length
    const upload = request.resumableUpload as ResumableUpload
    store.state = upload.state()
    seen.push({ upload, received })
    return { length: upload.length }
  }
  app.post('/', { config: { digest: { resumable: { creation: true } } } }, handler)
  app.patch('/', { config: { digest: { resumable: { loadState: () => store.state } } } }, handler)
  return { app, store, seen }
}

t.test('the fields are read as Structured Field Items, anything else ignored', async (t) => {
  t.same(uploadFieldsOf({ 'upload-complete': '?1', 'upload-offset': '10', 'upload-length': '20;a=1' }), { complete: true, offset: 10, length: 20 })
  for (const value of ['-1', '1.5', 'abc', '?1', '1, 2', '']) {
    t.same(uploadFieldsOf({ 'upload-complete': value, 'upload-offset': value, 'upload-length': value }).length, null, JSON.stringify(value))
  }
  t.same(uploadFieldsOf({}), { complete: null, offset: null, length: null })
  t.equal(uploadFieldsOf({ 'upload-complete': '1' }).complete, null, 'an Integer is no Boolean')
})

t.test('a creation: the declared length and the completing content must agree, and it is kept', async (t) => {
  const { app, store, seen } = await build(t)
  const create = async (headers: Record<string, string>, payload: string) =>
    await app.inject({ method: 'POST', url: '/', headers: { 'upload-complete': '?0', ...headers }, payload })

  const refused = await create({ 'upload-complete': '?1', 'upload-length': '5' }, 'four')
  t.equal(refused.statusCode, 400)
  t.same(refused.json(), inconsistent)
  t.equal(refused.headers['content-type'], 'application/problem+json')
  t.equal(refused.headers['upload-complete'], '?0')
  t.equal(seen.length, 0, 'refused before any handler')

  t.equal((await create({ 'upload-length': '3' }, 'four')).statusCode, 400, 'content past the declared length')
  t.equal(seen.length, 0)

  const declared = await create({ 'upload-length': '10' }, 'four')
  t.same(declared.json(), { length: 10 })
  t.equal(JSON.parse(store.state as string).length, 10, 'the state keeps the length')

  const derived = await create({ 'upload-complete': '?1' }, 'four')
  t.same(derived.json(), { length: 4 }, 'a completing creation gives the length')
  t.same((await create({}, 'four')).json(), { length: null }, 'unknown until declared or completed')
})

t.test('appends: a length that changes, content past it, and a completion short of it are refused', async (t) => {
  const { app, store, seen } = await build(t)
  const append = async (offset: number, headers: Record<string, string>, payload: string | Readable) =>
    await app.inject({ method: 'PATCH', url: '/', headers: { ...partial, 'upload-offset': String(offset), 'upload-complete': '?0', ...headers }, payload })
  t.equal((await app.inject({ method: 'POST', url: '/', headers: { 'upload-complete': '?0', 'upload-length': '10' }, payload: 'abcd' })).statusCode, 200)
  const created = store.state

  const changed = await append(4, { 'upload-length': '11' }, 'ef')
  t.equal(changed.statusCode, 400)
  t.same(changed.json(), inconsistent)
  t.equal((await append(4, {}, 'efghijklm')).statusCode, 400, 'a Content-Length past the length')
  t.equal((await append(4, { 'upload-complete': '?1' }, 'ef')).statusCode, 400, 'a completion short of the length')
  t.equal(seen.length, 1, 'each refused before any handler')
  t.equal(store.state, created, 'the state did not move')

  // Without a Content-Length (a stream), the content is measured as it arrives.
  const streamed = await append(4, {}, Readable.from([Buffer.from('efghij'), Buffer.from('klm')]))
  t.equal(streamed.statusCode, 400)
  t.same(streamed.json(), inconsistent)
  t.equal(streamed.headers['upload-complete'], '?1', 'the upload is over: it went past its length')
  t.equal(seen.length, 1, 'the handler reading it never saw its end')
  store.state = created

  // The same measured on completion: a stream that stops short of the length, and a stream whose
  // Upload-Length disagrees, refused in the header section though its size is unknown there.
  const short = await append(4, { 'upload-complete': '?1' }, Readable.from([Buffer.from('ef')]))
  t.equal(short.statusCode, 400)
  t.equal(short.headers['upload-complete'], '?1', 'a completion short of its length ends the upload')
  store.state = created
  const declared = await append(4, { 'upload-length': '12' }, Readable.from([Buffer.from('ef')]))
  t.same([declared.statusCode, declared.headers['upload-complete']], [400, '?0'], 'refused before its content')
  t.same(declared.json(), inconsistent)
  t.equal(store.state, created)

  t.same((await append(4, {}, 'efg')).json(), { length: 10 })
  t.same((await append(7, { 'upload-complete': '?1', 'upload-length': '10' }, 'hij')).json(), { length: 10 })
  t.equal(JSON.parse(store.state as string).length, 10)
})

// The model: the rule of section 4.1.3 as the draft states it, over a sequence of requests.
interface Step { declared: number | null, size: number, complete: boolean, streamed: boolean }

function modelOf (steps: Step[]): Array<'ok' | 'refused'> {
  let length: number | null = null
  let offset = 0
  return steps.map(({ declared, size, complete }) => {
    const indications = [length, declared, complete ? offset + size : null].filter((one) => one !== null)
    if (indications.some((one) => one !== indications[0])) return 'refused'
    const known = indications[0] ?? null
    if (known !== null && offset + size > known) return 'refused'
    length = known
    offset += size
    return 'ok'
  })
}

t.test('random sequences of creations and appends agree with the model', async (t) => {
  const random = seededRandom(fuzzSeed)
  const pick = (n: number): number => Math.floor(random() * n)
  for (let round = 0; round < 40; round++) {
    const { app, store } = await build(t)
    const count = 1 + pick(5)
    const steps: Step[] = Array.from({ length: count }, (_, i) => ({
      declared: pick(3) === 0 ? 4 + pick(12) : null,
      size: pick(6),
      complete: i === count - 1 && pick(2) === 0,
      streamed: pick(2) === 0
    }))
    const expected = modelOf(steps)
    let offset = 0
    const got: Array<'ok' | 'refused'> = []
    for (const [i, { declared, size, complete, streamed }] of steps.entries()) {
      const bytes = Buffer.alloc(size, 'x')
      const headers = {
        'upload-complete': complete ? '?1' : '?0',
        ...(declared === null ? {} : { 'upload-length': String(declared) }),
        ...(i === 0 ? {} : { ...partial, 'upload-offset': String(offset) })
      }
      const before = store.state
      const response = await app.inject({
        method: i === 0 ? 'POST' : 'PATCH', url: '/', headers, payload: streamed && size > 0 ? Readable.from([bytes]) : bytes
      })
      got.push(response.statusCode === 200 ? 'ok' : 'refused')
      if (response.statusCode === 200) offset += size
      else store.state = before
      // A creation refused leaves no upload: the sequence stops with it.
      if (i === 0 && response.statusCode !== 200) break
    }
    t.same(got, expected.slice(0, got.length), `round ${round}: ${JSON.stringify(steps)}`)
  }
})

t.test('a completing append cut short leaves the length its header section made known in the state', async (t) => {
  const app = Fastify()
  t.teardown(async () => await app.close())
  await app.register(fastifyDigestFields)
  app.removeAllContentTypeParsers()
  app.addContentTypeParser('*', (_request, _payload, done) => done(null))
  let state: string | null = null
  let stored = (): void => {}
  const handler = async (request: FastifyRequest): Promise<string> => {
    try {
      for await (const chunk of request.raw) (chunk as Buffer).subarray(0, 0)
    } finally {
      state = (request.resumableUpload as ResumableUpload).state()
      stored()
    }
    return 'ok'
  }
  app.post('/', { config: { digest: { resumable: { creation: true } } } }, handler)
  app.patch('/', { config: { digest: { resumable: { loadState: () => state } } } }, handler)
  t.equal((await app.inject({ method: 'POST', url: '/', headers: { 'upload-complete': '?0' }, payload: 'sixteen bytes..!' })).statusCode, 200)
  t.equal(JSON.parse(state as unknown as string).length, undefined, 'no length known yet')
  const port = await listen(app)
  const started = once(app.server, 'request')
  const socket = connect({ host: '127.0.0.1', port })
  await once(socket, 'connect')
  const head = ['PATCH / HTTP/1.1', 'Host: localhost', 'Content-Type: application/partial-upload', 'Upload-Offset: 16', 'Upload-Complete: ?1', 'Content-Length: 16']
  const cut = new Promise<void>((resolve) => { stored = resolve })
  socket.write([...head, '', 'eight by'].join('\r\n'))
  // Cut once the server has the request: its header section was read.
  await started
  socket.destroy()
  await cut
  const after = JSON.parse(state as unknown as string) as { offset: number, length?: number }
  t.same([after.offset, after.length], [16, 32], 'no content of the append kept, the length it made known recorded')
})
