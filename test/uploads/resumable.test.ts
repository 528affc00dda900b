import { createHash } from 'node:crypto'
import { finished } from 'node:stream/promises'
import t from 'tap'
import Fastify, { type FastifyInstance, type FastifyRequest } from 'fastify'
import fastifyDigestFields, { type ResumableUpload } from '../../lib/index.js'
import { fuzzSeed, h2Request, listen, problemTypes, rawRequest, seededBytes, seededRandom, type Tap } from '../helpers.js'

// The plugin's side of resumable uploads, without the example server: what request.resumableUpload
// says, the states it gives and takes, and every refusal. An in-memory store plays the application;
// the oracle is Node's createHash over the bytes sent.

t.comment(`seed ${fuzzSeed}`)

type Key = 'sha-256' | 'sha-512' | 'md5' | 'sha'
const nodeName = { 'sha-256': 'sha256', 'sha-512': 'sha512', md5: 'md5', sha: 'sha1' } as const
const digestOf = (key: Key, data: Buffer | string): string => createHash(nodeName[key]).update(data).digest('base64')
const member = (key: Key, data: Buffer | string): string => `${key}=:${digestOf(key, data)}:`
const partial = { 'content-type': 'application/partial-upload' }

interface Seen {
  upload: ResumableUpload | null
  state: string | null
  digests: Record<string, string>
  received: number
  /** What digests() gave before the content was read. */
  early: object | undefined
}

/**
 * POST / creates and PATCH / appends; the state each request leaves is what the next one loads
 * (`stored`), as an application would keep it. The handlers read the whole content and then report
 * what the plugin said.
 */
async function build (t: Tap, options: { http2?: boolean, route?: object, plugin?: object, logs?: string[] } = {}):
Promise<{ app: FastifyInstance, store: { state: unknown }, seen: Seen[] }> {
  const logs = options.logs
  const logger = logs === undefined ? false : { level: 'error', stream: { write: (line: string) => logs.push(line) } }
  const app = Fastify({ http2: options.http2 === true, logger } as object) as unknown as FastifyInstance
  t.teardown(async () => await app.close())
  await app.register(fastifyDigestFields, { algorithms: ['sha-256', 'sha-512', 'md5', 'sha'], ...options.plugin })
  app.removeAllContentTypeParsers()
  app.addContentTypeParser('*', (_request, _payload, done) => done(null))
  const store: { state: unknown } = { state: null }
  const seen: Seen[] = []
  const loadState = (request: FastifyRequest): string => (request.headers['x-state'] as string | undefined) ?? store.state as string
  const handler = async (request: FastifyRequest): Promise<object> => {
    const early = request.resumableUpload?.digests()
    let received = 0
    for await (const chunk of request.raw) received += (chunk as Buffer).length
    const upload = request.resumableUpload
    const state = upload?.state() ?? null
    if (state !== null) store.state = state
    const digests = Object.fromEntries(Object.entries(upload?.digests() ?? {}).map(([k, v]) => [k, v.toString('base64')]))
    seen.push({ upload, state, digests, received, early })
    return { received }
  }
  app.post('/', { config: { digest: { resumable: { creation: true }, ...options.route } } }, handler)
  app.patch('/', { config: { digest: { resumable: { loadState }, ...options.route } } }, handler)
  return { app, store, seen }
}

const offsetOf = (state: string | null): number => JSON.parse(String(state)).offset

t.test('a creation and its appends: request.resumableUpload, the states, and the comparison at the end', async (t) => {
  const { app, seen } = await build(t)
  const data = seededBytes(50_000, 3)
  const created = await app.inject({
    method: 'POST',
    url: '/',
    headers: { 'upload-complete': '?0', 'repr-digest': `${member('sha-512', data)}, ${member('md5', data)}` },
    payload: data.subarray(0, 20_000)
  })
  t.equal(created.statusCode, 200)
  const first = seen[0] as Seen
  t.match(first.upload, { creation: true, complete: false, offset: 0, failed: false })
  t.same(first.early, {}, 'no digest before the content is verified')
  t.equal(offsetOf(first.state), 20_000, 'the state covers the creation\'s content')
  t.ok((first.state as string).length < 1000, `the state is ${(first.state as string).length} bytes`)
  t.same(Object.keys(first.digests), ['sha-512', 'md5'], 'hashed with the algorithms of the creation\'s Repr-Digest')
  t.equal(first.digests['sha-512'], digestOf('sha-512', data.subarray(0, 20_000)), 'the digest so far')
  t.notOk(created.headers['repr-digest'], 'a response with content is not given the upload\'s digest')

  const appended = await app.inject({
    method: 'PATCH', url: '/', headers: { ...partial, 'upload-complete': '?0', 'upload-offset': '20000' }, payload: data.subarray(20_000, 30_000)
  })
  t.equal(appended.statusCode, 200)
  t.match(seen[1]?.upload, { creation: false, complete: false, offset: 20_000 })
  t.equal(offsetOf(seen[1]?.state as string), 30_000)

  const completed = await app.inject({
    method: 'PATCH', url: '/', headers: { ...partial, 'upload-complete': '?1', 'upload-offset': '30000' }, payload: data.subarray(30_000)
  })
  t.equal(completed.statusCode, 200)
  t.equal(seen[2]?.digests.md5, digestOf('md5', data), 'the whole upload matched')
  t.equal(offsetOf(seen[2]?.state as string), 50_000)
})

t.test('a flipped byte in an earlier request fails the completing one with the mismatch problem', async (t) => {
  for (const problemTypesShape of ['draft-00', 'registered'] as const) {
    const { app, seen } = await build(t, { route: { problemTypes: problemTypesShape } })
    const data = seededBytes(9000, 5)
    const sent = Buffer.from(data)
    sent[100] = (sent[100] as number) ^ 1
    await app.inject({ method: 'POST', url: '/', headers: { 'upload-complete': '?0', 'repr-digest': member('sha', data) }, payload: sent.subarray(0, 4000) })
    const completed = await app.inject({
      method: 'PATCH', url: '/', headers: { ...partial, 'upload-complete': '?1', 'upload-offset': '4000' }, payload: sent.subarray(4000)
    })
    t.equal(completed.statusCode, 400, problemTypesShape)
    t.equal(completed.headers['upload-complete'], '?1', 'the upload is over')
    const problem = completed.json()
    t.equal(problem.type, `${problemTypes}${problemTypesShape === 'draft-00' ? 'digest-mismatching-value' : 'digest-mismatched-values'}`)
    if (problemTypesShape === 'registered') t.equal(problem.mismatched_digests[0].header, 'Repr-Digest')
    t.equal(seen.length, 1, 'the handler of the failed append did not see its end')
  }
})

t.test('verified content the application does not keep: state({ contentKept: false }) is where the request started', async (t) => {
  const { app, seen } = await build(t)
  const data = seededBytes(9000, 6)
  await app.inject({ method: 'POST', url: '/', headers: { 'upload-complete': '?0', 'upload-length': '9000', 'repr-digest': member('sha-256', data) }, payload: data.subarray(0, 4000) })
  const append = { ...partial, 'upload-complete': '?0', 'upload-offset': '4000' }
  t.equal((await app.inject({ method: 'PATCH', url: '/', headers: append, payload: data.subarray(4000, 6000) })).statusCode, 200)
  const dropped = seen[1]?.upload as ResumableUpload
  t.equal(offsetOf(dropped.state()), 6000, 'state() covers the verified content')
  const started = dropped.state({ contentKept: false })
  t.same(JSON.parse(started), { ...JSON.parse(seen[0]?.state as string), length: 9000 }, 'state({ contentKept: false }) is the one it started from')
  // The application wrote none of it: the client sends it again, from the state stored without it.
  const again = await app.inject({ method: 'PATCH', url: '/', headers: { ...append, 'x-state': started }, payload: data.subarray(4000, 6000) })
  t.equal(again.statusCode, 200)
  const completed = await app.inject({ method: 'PATCH', url: '/', headers: { ...partial, 'upload-complete': '?1', 'upload-offset': '6000' }, payload: data.subarray(6000) })
  t.equal(completed.statusCode, 200, 'and the whole upload verifies')
  t.equal(seen[3]?.digests['sha-256'], digestOf('sha-256', data))
})

t.test('the creation\'s own content is the upload when Upload-Complete is ?1', async (t) => {
  const { app, seen } = await build(t)
  const good = await app.inject({ method: 'POST', url: '/', headers: { 'upload-complete': '?1', 'repr-digest': member('sha-256', 'whole') }, payload: 'whole' })
  t.equal(good.statusCode, 200)
  t.match(seen[0]?.upload, { creation: true, complete: true, failed: false })
  const bad = await app.inject({ method: 'POST', url: '/', headers: { 'upload-complete': '?1', 'repr-digest': member('sha-256', 'other') }, payload: 'whole' })
  t.equal(bad.statusCode, 400)
  t.equal(bad.headers['upload-complete'], '?1')
  const empty = await app.inject({ method: 'POST', url: '/', headers: { 'upload-complete': '?1', 'repr-digest': member('sha-256', 'x'), 'content-length': '0' } })
  t.equal(empty.statusCode, 400, 'an empty creation is compared at once')
  t.equal(empty.headers['upload-complete'], '?1')
  const emptyGood = await app.inject({ method: 'POST', url: '/', headers: { 'upload-complete': '?1', 'repr-digest': member('sha-256', ''), 'content-length': '0' } })
  t.equal(emptyGood.statusCode, 200)
})

t.test('an empty completing append is compared at once', async (t) => {
  const { app, store } = await build(t)
  await app.inject({ method: 'POST', url: '/', headers: { 'upload-complete': '?0', 'repr-digest': member('sha-256', 'abc') }, payload: 'abc' })
  const saved = store.state
  const wrong = await app.inject({ method: 'PATCH', url: '/', headers: { ...partial, 'upload-complete': '?1', 'upload-offset': '3', 'content-length': '0', 'x-state': String(saved) } })
  t.equal(wrong.statusCode, 200, 'the stored upload matches')
  store.state = saved
  await app.inject({ method: 'POST', url: '/', headers: { 'upload-complete': '?0', 'repr-digest': member('sha-256', 'abd') }, payload: 'abc' })
  const failed = await app.inject({ method: 'PATCH', url: '/', headers: { ...partial, 'upload-complete': '?1', 'upload-offset': '3', 'content-length': '0' } })
  t.equal(failed.statusCode, 400)
  t.equal(failed.headers['upload-complete'], '?1')
  const open = await app.inject({ method: 'PATCH', url: '/', headers: { ...partial, 'upload-complete': '?0', 'upload-offset': '3', 'content-length': '0', 'x-state': String(saved) } })
  t.equal(open.statusCode, 200, 'an empty append that does not complete leaves the state as it was')
})

t.test('Content-Digest is checked on every request; a Repr-Digest on an append is judged, never compared', async (t) => {
  const { app, store } = await build(t)
  await app.inject({ method: 'POST', url: '/', headers: { 'upload-complete': '?0', 'content-digest': member('sha-256', 'not it') }, payload: 'abc' })
    .then((response) => {
      t.equal(response.statusCode, 400, 'the creation\'s Content-Digest covers its content')
      t.equal(response.headers['upload-complete'], '?0', 'the upload may go on')
    })
  await app.inject({ method: 'POST', url: '/', headers: { 'upload-complete': '?0' }, payload: 'abc' })
  const append = { ...partial, 'upload-complete': '?0', 'upload-offset': '3' }
  const reprOfPart = await app.inject({ method: 'PATCH', url: '/', headers: { ...append, 'repr-digest': member('sha-256', 'something else') }, payload: 'def' })
  t.equal(reprOfPart.statusCode, 200, 'a well-formed Repr-Digest on an append is not compared')
  store.state = JSON.stringify({ ...JSON.parse(String(store.state)), offset: 3 })
  const invalid = await app.inject({ method: 'PATCH', url: '/', headers: { ...append, 'repr-digest': 'sha-256=:AAAA:' }, payload: 'def' })
  t.equal(invalid.statusCode, 400, 'one that cannot be a digest is refused')
  t.equal(invalid.json().type, `${problemTypes}digest-invalid-value`)
})

t.test('Upload-Complete must be a Boolean, and a route with `required` takes the creation\'s Repr-Digest as the check', async (t) => {
  const { app } = await build(t, { route: { required: true } })
  for (const value of ['yes', '?2', '1', '"?1"']) {
    const response = await app.inject({ method: 'POST', url: '/', headers: { 'upload-complete': value, 'repr-digest': member('sha-256', 'abc') }, payload: 'abc' })
    t.equal(response.statusCode, 400, value)
    t.match(response.json().detail, /Upload-Complete must be a structured-field Boolean/)
  }
  const parameters = await app.inject({ method: 'POST', url: '/', headers: { 'upload-complete': '?0;x=1', 'repr-digest': member('sha-256', 'abc') }, payload: 'ab' })
  t.equal(parameters.statusCode, 200, 'parameters are ignored')
  const none = await app.inject({ method: 'POST', url: '/', headers: { 'upload-complete': '?0' }, payload: 'ab' })
  t.equal(none.statusCode, 400, 'an upload with no digest at all is refused on a `required` route')
  const unchecked = JSON.stringify({ v: 1, offset: 0, expected: {}, want: [], hashes: {} })
  const append = await app.inject({ method: 'PATCH', url: '/', headers: { ...partial, 'upload-complete': '?0', 'upload-offset': '0', 'x-state': unchecked }, payload: 'ab' })
  t.equal(append.statusCode, 400, 'and so is an append to one')
  const checked = await app.inject({ method: 'PATCH', url: '/', headers: { ...partial, 'upload-complete': '?0', 'upload-offset': '2' }, payload: 'c' })
  t.equal(checked.statusCode, 200, 'an append to an upload with a Repr-Digest needs no field of its own')
})

t.test('Want-Repr-Digest: the upload\'s digest so far on answers without content, in the header section', async (t) => {
  const app = Fastify()
  t.teardown(async () => await app.close())
  await app.register(fastifyDigestFields)
  app.addContentTypeParser('*', (_request, _payload, done) => done(null))
  let stored: string | null = null
  const creation = { digest: { resumable: { creation: true as const } } }
  const appends = { digest: { resumable: { loadState: async () => stored } } }
  const handler = async (request: FastifyRequest, reply: import('fastify').FastifyReply): Promise<void> => {
    await finished(request.raw.resume())
    stored = (request.resumableUpload as ResumableUpload).state()
    await reply.code(request.method === 'POST' ? 201 : 204).send()
  }
  app.post('/', { config: creation }, handler)
  app.patch('/', { config: appends }, handler)
  const created = await app.inject({ method: 'POST', url: '/', headers: { 'upload-complete': '?0', 'want-repr-digest': 'sha-256=3' }, payload: 'abc' })
  t.equal(created.headers['repr-digest'], member('sha-256', 'abc'))
  const appended = await app.inject({ method: 'PATCH', url: '/', headers: { ...partial, 'upload-complete': '?0', 'upload-offset': '3' }, payload: 'def' })
  t.equal(appended.headers['repr-digest'], member('sha-256', 'abcdef'), 'the creation\'s preference holds for its appends')
  t.notOk(appended.headers.vary, 'an append that did not ask does not vary')
  const h2 = await (async () => {
    const server = Fastify({ http2: true } as object) as unknown as FastifyInstance
    t.teardown(async () => await server.close())
    await server.register(fastifyDigestFields)
    server.addContentTypeParser('*', (_request, _payload, done) => done(null))
    server.patch('/', { config: appends }, handler)
    return await h2Request(await listen(server), {
      ':method': 'PATCH', ':path': '/', ...partial, 'upload-complete': '?1', 'upload-offset': '6', 'want-repr-digest': 'sha-512=1'
    }, [Buffer.from('gh'), Buffer.from('i')])
  })()
  t.equal(h2.status, 204, 'HTTP/2')
  t.notOk(h2.headers['repr-digest'], 'an algorithm the upload is not hashed with is not sent')
  t.equal(offsetOf(stored), 9)
})

t.test('loadState: an unknown upload is left to the application; a broken state is refused, and the log says where', async (t) => {
  const logs: string[] = []
  const { app, seen, store } = await build(t, { logs })
  const append = { ...partial, 'upload-complete': '?1', 'upload-offset': '0' }
  const unknown = await app.inject({ method: 'PATCH', url: '/', headers: { ...append, 'repr-digest': member('sha-256', 'other') }, payload: 'abc' })
  t.equal(unknown.statusCode, 200)
  t.equal(seen[0]?.upload, null, 'no upload for the application')
  const valid = JSON.stringify({ v: 1, offset: 0, expected: {}, want: [], hashes: {} })
  const cases: Array<[unknown, RegExp]> = [
    [42, /is not a string/],
    ['{', /is not JSON/],
    ['null', /is not of version 1/],
    [JSON.stringify({ v: 2 }), /is not of version 1/],
    [JSON.stringify({ v: 1, offset: -1 }), /has no offset/],
    [JSON.stringify({ v: 1, offset: 0, complete: false }), /has a bad completion mark/],
    [JSON.stringify({ v: 1, offset: 0, length: '3' }), /has a length that is not a whole number of bytes at least its offset/],
    [JSON.stringify({ v: 1, offset: 0, length: 1.5 }), /has a length that is not/],
    [JSON.stringify({ v: 1, offset: 4, length: 3 }), /has a length that is not/],
    [JSON.stringify({ v: 1, offset: 0 }), /has no want list/],
    [JSON.stringify({ v: 1, offset: 0, want: [] }), /has no expected/],
    [JSON.stringify({ v: 1, offset: 0, want: [], expected: { crc32: 'AA==' }, hashes: {} }), /has an unknown algorithm "crc32" in expected/],
    [JSON.stringify({ v: 1, offset: 0, want: [], expected: { 'sha-256': 1 }, hashes: {} }), /has expected sha-256 that is not base64/],
    [JSON.stringify({ v: 1, offset: 0, want: [], expected: { 'sha-256': 'AAAA' }, hashes: {} }), /has expected sha-256 that is 3 bytes, not 32/],
    [JSON.stringify({ v: 1, offset: 0, want: ['crc32'], expected: {}, hashes: {} }), /wants an unknown algorithm "crc32"/],
    [JSON.stringify({ v: 1, offset: 0, want: ['sha-512'], expected: {}, hashes: {} }), /has no running hash for sha-512/],
    [JSON.stringify({ v: 1, offset: 0, want: [], expected: {}, hashes: { 'sha-256': 'AAAA' } }), /has hashes sha-256 that is 3 bytes, not 116/]
  ]
  for (const [state, message] of cases) {
    store.state = state
    logs.length = 0
    const response = await app.inject({ method: 'PATCH', url: '/', headers: append, payload: 'abc' })
    t.equal(response.statusCode, 400, String(state))
    t.same(response.json(), { type: 'about:blank', title: 'Bad Request', detail: 'the upload cannot be resumed: the state stored with it does not read' })
    t.equal(logs.length, 1, 'one line, at the level of a fault of the server\'s')
    t.match(JSON.parse(logs[0] as string).msg, message)
  }
  store.state = valid
  t.equal((await app.inject({ method: 'PATCH', url: '/', headers: append, payload: '' })).statusCode, 200, 'a state without digests')
})

t.test('loadState may answer for the application, and is called before any content is read', async (t) => {
  const app = Fastify()
  t.teardown(async () => await app.close())
  await app.register(fastifyDigestFields)
  app.addContentTypeParser('*', (_request, _payload, done) => done(null))
  let readBefore: boolean | null = null
  const loadState = (request: FastifyRequest): never => {
    readBefore = request.raw.readableDidRead
    throw Object.assign(new Error('no such upload'), { statusCode: 404 })
  }
  app.patch('/', { config: { digest: { resumable: { loadState } } } }, async () => 'never')
  const response = await app.inject({ method: 'PATCH', url: '/', headers: { ...partial, 'upload-complete': '?0', 'upload-offset': '0' }, payload: 'abc' })
  t.equal(response.statusCode, 404)
  t.equal(readBefore, false)
})

t.test('resumable is a route option, checked when the route is declared', async (t) => {
  const app = Fastify()
  t.teardown(async () => await app.close())
  await app.register(fastifyDigestFields)
  const declare = (resumable: unknown) => () => app.post(`/${Math.random()}`, { config: { digest: { resumable } as object } }, async () => '')
  t.throws(declare(1), /resumable: expected an options object, got 1/)
  t.throws(declare({ loadState: 'x' }), /resumable\.loadState must be a function, got 'x'/)
  t.throws(declare({ loadState () {}, other: 1 }), /unknown option 'other' \(expected creation, loadState\)/)
  t.throws(declare({}), /resumable takes creation: true \(the route creates uploads\) or loadState \(it takes appends\), not both/)
  t.throws(declare({ creation: false }), /resumable takes creation: true/)
  t.throws(declare({ creation: true, loadState () {} }), /not both/)
  t.throws(declare({ creation: 'yes' }), /resumable\.creation must be true or false, got 'yes'/)
  t.doesNotThrow(declare({ creation: true }))
  const plugin = Fastify()
  t.teardown(async () => await plugin.close())
  await t.rejects(async () => { await plugin.register(fastifyDigestFields, { resumable: { loadState () {} } } as object) }, /unknown option 'resumable'/)
})

t.test('an append at another offset, or none, gets the draft\'s 409 before its content is read', async (t) => {
  const { app, seen } = await build(t)
  await app.inject({ method: 'POST', url: '/', headers: { 'upload-complete': '?0' }, payload: 'abcde' })
  const cases: Array<[string | undefined, number | null]> = [['4', 4], ['6', 6], ['5.0', null], ['?1', null], ['"5"', null], [undefined, null], ['5, 6', null]]
  for (const [offset, provided] of cases) {
    const headers: Record<string, string> = { ...partial, 'upload-complete': '?0' }
    if (offset !== undefined) headers['upload-offset'] = offset
    const response = await app.inject({ method: 'PATCH', url: '/', headers, payload: 'f' })
    t.equal(response.statusCode, 409, `Upload-Offset: ${String(offset)}`)
    t.equal(response.headers['content-type'], 'application/problem+json')
    t.equal(response.headers['upload-offset'], '5')
    t.equal(response.headers['upload-complete'], '?0')
    t.strictSame(response.json(), {
      type: `${problemTypes}mismatching-upload-offset`,
      title: 'offset from request does not match offset of resource',
      'expected-offset': 5,
      ...(provided === null ? {} : { 'provided-offset': provided })
    })
  }
  t.equal(seen.length, 1, 'no handler ran')
  const agreed = await app.inject({ method: 'PATCH', url: '/', headers: { ...partial, 'upload-complete': '?0', 'upload-offset': '5;p' }, payload: 'f' })
  t.equal(agreed.statusCode, 200, 'parameters are ignored')
})

t.test('on a resumable route, other requests are verified as usual, and a bad creation field is refused', async (t) => {
  const { app, seen } = await build(t)
  const plain = await app.inject({ method: 'POST', url: '/', headers: { 'repr-digest': member('sha-256', 'other') }, payload: 'abc' })
  t.equal(plain.statusCode, 400, 'a request without Upload-Complete compares its Repr-Digest with its content')
  t.notOk(plain.headers['upload-complete'])
  const fine = await app.inject({ method: 'POST', url: '/', headers: { 'content-digest': member('sha-256', 'abc') }, payload: 'abc' })
  t.equal(fine.statusCode, 200)
  t.equal(seen[0]?.upload, null)
  const bad = await app.inject({ method: 'POST', url: '/', headers: { 'upload-complete': '?0', 'repr-digest': 'sha-256=:AAAA:' }, payload: 'abc' })
  t.equal(bad.statusCode, 400)
  t.equal(bad.json().type, `${problemTypes}digest-invalid-value`)
  const unsupported = await app.inject({ method: 'POST', url: '/', headers: { 'upload-complete': '?0', 'repr-digest': 'crc32c=:AAAA:' }, payload: 'abc' })
  t.equal(unsupported.json().type, `${problemTypes}digest-unsupported-algorithm`)
})

t.test('an answer without content to an upload that asked for no digest carries none', async (t) => {
  const app = Fastify()
  t.teardown(async () => await app.close())
  await app.register(fastifyDigestFields, { responseDigests: ['repr-digest'] })
  app.addContentTypeParser('*', (_request, _payload, done) => done(null))
  app.post('/', { config: { digest: { resumable: { creation: true } } } }, async (request, reply) => {
    await finished(request.raw.resume())
    await reply.code(201).send()
  })
  const created = await app.inject({ method: 'POST', url: '/', headers: { 'upload-complete': '?0' }, payload: 'abc' })
  t.equal(created.statusCode, 201)
  t.notOk(created.headers['repr-digest'], 'not the digest of the empty answer, nor of the upload')
})

t.test('uploads running at once each keep their own digest, hashers used again or not', async (t) => {
  const app = Fastify()
  t.teardown(async () => await app.close())
  await app.register(fastifyDigestFields)
  app.addContentTypeParser('*', (_request, _payload, done) => done(null))
  const states = new Map<string, string>()
  const loadState = (request: FastifyRequest): string | undefined => states.get((request.params as { id: string }).id)
  const handler = async (request: FastifyRequest): Promise<string> => {
    const upload = request.resumableUpload as ResumableUpload
    await finished(request.raw.resume())
    states.set((request.params as { id: string }).id, upload.state())
    return 'ok'
  }
  app.post('/:id', { config: { digest: { resumable: { creation: true } } } }, handler)
  app.patch('/:id', { config: { digest: { resumable: { loadState } } } }, handler)
  const origin = `http://127.0.0.1:${await listen(app)}`
  const { request } = await import('undici')
  const random = seededRandom(fuzzSeed + 19)
  const uploads = Array.from({ length: 24 }, (_, i) => {
    const data = seededBytes(1 + Math.floor(random() * 200_000), i + 1)
    const cut = [0, Math.floor(random() * data.length), data.length].sort((a, b) => a - b) as [number, number, number]
    const flipped = i % 4 === 3
    return { id: `u${i}`, data, cut, flipped, key: (i % 2 === 0 ? 'sha-256' : 'sha-512') as Key }
  })
  const statuses = await Promise.all(uploads.map(async ({ id, data, cut, flipped, key }) => {
    const sent = Buffer.from(data)
    if (flipped) sent[cut[1] % sent.length] = (sent[cut[1] % sent.length] as number) ^ 4
    const first = await request(`${origin}/${id}`, {
      method: 'POST', headers: { 'upload-complete': '?0', 'repr-digest': member(key, data) }, body: sent.subarray(0, cut[1])
    })
    await first.body.dump()
    const last = await request(`${origin}/${id}`, {
      method: 'PATCH',
      headers: { ...partial, 'upload-complete': '?1', 'upload-offset': String(cut[1]) },
      body: sent.subarray(cut[1])
    })
    await last.body.dump()
    return last.statusCode
  }))
  t.same(statuses, uploads.map(({ flipped }) => flipped ? 400 : 200), 'each upload matched or failed on its own bytes')
})

t.test('more uploads at once than hashers kept idle: every one verified, the extra hashers dropped', async (t) => {
  const { app, seen } = await build(t)
  const bodies = Array.from({ length: 80 }, (_, i) => `upload ${i}`)
  const answers = await Promise.all(bodies.map(async (body) => await app.inject({
    method: 'POST', url: '/', headers: { 'upload-complete': '?1', 'repr-digest': `${member('sha-256', body)}, ${member('sha-512', body)}` }, payload: body
  })))
  t.same(answers.map(({ statusCode }) => statusCode), bodies.map(() => 200))
  t.same(seen.map(({ digests }) => digests['sha-512']).sort(), bodies.map((body) => digestOf('sha-512', body)).sort())
})

t.test('a route creates uploads or takes appends as it says; an upload\'s Repr-Digest in a trailer section is refused', async (t) => {
  const app = Fastify()
  t.teardown(async () => await app.close())
  await app.register(fastifyDigestFields)
  app.addContentTypeParser('*', (_request, _payload, done) => done(null))
  const handler = async (request: FastifyRequest): Promise<string> => {
    await finished(request.raw.resume())
    return 'taken'
  }
  app.post('/create', { config: { digest: { resumable: { creation: true } } } }, handler)
  app.patch('/append', { config: { digest: { resumable: { loadState: () => JSON.stringify({ v: 1, offset: 0, expected: {}, want: [], hashes: {} }) } } } }, handler)
  const append = await app.inject({ method: 'POST', url: '/create', headers: { ...partial, 'upload-complete': '?1', 'upload-offset': '0' }, payload: 'x' })
  t.equal(append.statusCode, 400)
  t.match(append.json().detail, /this resource creates uploads/)
  const creation = await app.inject({ method: 'PATCH', url: '/append', headers: { 'content-type': 'text/plain', 'upload-complete': '?1' }, payload: 'x' })
  t.equal(creation.statusCode, 400)
  t.match(creation.json().detail, /this resource takes appends to its upload/)
  t.equal((await app.inject({ method: 'PATCH', url: '/append', headers: { ...partial, 'upload-complete': '?1', 'upload-offset': '0' }, payload: 'x' })).statusCode, 200)

  const port = await listen(app)
  for (const path of ['/create', '/append']) {
    const head = [`${path === '/create' ? 'POST' : 'PATCH'} ${path} HTTP/1.1`, 'Host: localhost', 'Upload-Complete: ?1', 'Transfer-Encoding: chunked',
      ...(path === '/append' ? ['Content-Type: application/partial-upload', 'Upload-Offset: 0'] : [])]
    const announced = await rawRequest(port, [...head, 'Trailer: Repr-Digest'])
    t.equal(announced.status, 400, `${path}: announced, refused before the content`)
    t.match(JSON.parse(announced.body).detail, /the Repr-Digest of an upload goes in the header section of its creation/)
    const sent = await rawRequest(port, head, [Buffer.from(`5\r\nhello\r\n0\r\nRepr-Digest: ${member('sha-256', 'hello')}\r\n\r\n`)])
    t.equal(sent.status, 400, `${path}: unannounced, refused at the end, even when it would match`)
    t.match(JSON.parse(sent.body).detail, /the Repr-Digest of an upload goes in the header section of its creation/)
    const contentDigest = await rawRequest(port, [...head, 'Trailer: Content-Digest'],
      [Buffer.from(`5\r\nhello\r\n0\r\nContent-Digest: ${member('sha-256', 'hello')}\r\n\r\n`)])
    t.equal(contentDigest.status, 200, `${path}: an announced Content-Digest in the trailer section is checked as usual`)
  }
})
