import crypto, { createHash } from 'node:crypto'
import { syncBuiltinESMExports } from 'node:module'
import t from 'tap'
import fc from 'fast-check'
import { buildApp, fuzzScale, fuzzSeed, hello, helloSha256, listen, member, randomChunks, rawRequest, seededBytes, seededRandom, type Tap } from '../helpers.js'

/** Replaces a node:crypto export for the test, in the ESM bindings the plugin imported too. */
function spyOnCrypto<K extends 'createHash' | 'hash' | 'timingSafeEqual'> (t: Tap, name: K, spy: (original: typeof crypto[K]) => typeof crypto[K]): void {
  const original = crypto[name]
  crypto[name] = spy(original)
  syncBuiltinESMExports()
  t.teardown(() => {
    crypto[name] = original
    syncBuiltinESMExports()
  })
}

t.test('over a real socket, in random chunk sizes, the verdict always equals a direct hash comparison', async (t) => {
  t.comment(`seed ${fuzzSeed} (DIGEST_FUZZ_SEED replays it)`)
  const { app, calls } = await buildApp({}, { bodyLimit: 8 * 1024 * 1024 })
  app.addContentTypeParser('application/octet-stream', { parseAs: 'buffer' }, (_request, body, done) => done(null, body))
  app.put('/bytes', async (request) => {
    calls.handler++
    return { length: (request.body as Buffer).length }
  })
  const port = await listen(app)
  t.teardown(() => app.close())

  const size = fc.oneof(
    { weight: 3, arbitrary: fc.integer({ min: 0, max: 1024 }) },
    { weight: 3, arbitrary: fc.integer({ min: 1025, max: 256 * 1024 }) },
    { weight: 1, arbitrary: fc.integer({ min: 256 * 1024, max: 6 * 1024 * 1024 }) }
  )
  const verdicts = { accepted: 0, rejected: 0, bytes: 0 }
  await fc.assert(fc.asyncProperty(
    size, fc.integer(), fc.integer({ min: 1, max: 65536 }), fc.boolean(), fc.constantFrom('sha-256', 'sha-512') as fc.Arbitrary<'sha-256' | 'sha-512'>,
    async (length, seed, maxChunk, corrupt, algorithm) => {
      const body = seededBytes(length, seed)
      const sent = corrupt ? Buffer.concat([body, Buffer.from([1])]) : body
      const provided = member(algorithm, sent)
      // No more than about 2000 writes a request, however small the chunks.
      const chunks = randomChunks(body, Math.max(maxChunk, Math.ceil(length / 2000)), seededRandom(seed))
      const head = ['PUT /bytes HTTP/1.1', 'Host: localhost', 'Content-Type: application/octet-stream', `Content-Length: ${length}`, `Content-Digest: ${provided}`]
      const before = calls.handler
      const response = await rawRequest(port, head, chunks)
      const matches = createHash(algorithm === 'sha-256' ? 'sha256' : 'sha512').update(body).digest('base64') === provided.slice(algorithm.length + 2, -1)
      verdicts.bytes += length
      if (matches) {
        verdicts.accepted++
        return response.status === 200 && JSON.parse(response.body).length === length && calls.handler === before + 1
      }
      verdicts.rejected++
      return response.status === 400 && JSON.parse(response.body).type.endsWith('#digest-mismatching-value') && calls.handler === before
    }
  ), { numRuns: Math.round(60 * fuzzScale), seed: fuzzSeed })
  t.ok(verdicts.accepted > 0 && verdicts.rejected > 0, `accepted ${verdicts.accepted}, rejected ${verdicts.rejected}`)
  t.comment(`chunked uploads: ${verdicts.accepted + verdicts.rejected} requests, ${(verdicts.bytes / 1048576).toFixed(1)} MiB`)
})

t.test('a field with thousands of members hashes once per distinct supported algorithm', async (t) => {
  const { app } = await buildApp()
  const port = await listen(app)
  t.teardown(() => app.close())
  // A body in one chunk is hashed one-shot (crypto.hash), a longer one incrementally (createHash).
  let hashed = 0
  spyOnCrypto(t, 'createHash', (original) => ((...args: Parameters<typeof original>) => { hashed++; return original(...args) }) as typeof original)
  spyOnCrypto(t, 'hash', (original) => ((...args: Parameters<typeof original>) => { hashed++; return original(...args) }) as typeof original)
  const sha256 = helloSha256.slice('sha-256='.length)
  const cases = (members: number): Array<[Record<string, string>, number]> => {
    const repeated = Array.from({ length: members }, () => `sha-256=${sha256}`).join(', ')
    const unknown = Array.from({ length: members }, (_, i) => `alg${i}=${sha256}`).join(', ')
    return [
      [{ 'content-digest': repeated }, 1],
      [{ 'content-digest': `${unknown}, ${helloSha256}` }, 1],
      [{ 'content-digest': repeated, 'repr-digest': `${repeated}, ${member('sha-512', hello)}` }, 2],
      // Nothing of the request to check; the response is hashed once, for the Content-Digest it asks for.
      [{ 'want-content-digest': Array.from({ length: members }, (_, i) => `k${i}=${i % 11}`).join(', ') + ', sha-256=5' }, 1]
    ]
  }
  for (const [headers, hashes] of cases(3000)) {
    hashed = 0
    const response = await app.inject({ method: 'POST', url: '/', payload: hello, headers: { 'content-type': 'application/json', ...headers } })
    t.equal(response.statusCode, 200)
    t.equal(hashed, hashes, `${hashes} hash(es) for 3000 members in ${Object.keys(headers).join(' and ')}, body in one chunk`)
  }
  // Node's 16 KiB header limit allows about 100 members over a socket.
  for (const [headers, hashes] of cases(100)) {
    hashed = 0
    const head = ['POST / HTTP/1.1', 'Host: localhost', 'Content-Type: application/json', `Content-Length: ${hello.length}`,
      ...Object.entries(headers).map(([name, value]) => `${name}: ${value}`)]
    const chunked = await rawRequest(port, head, [Buffer.from(hello.slice(0, 6)), Buffer.from(hello.slice(6, 12)), Buffer.from(hello.slice(12))])
    t.equal(chunked.status, 200)
    t.equal(hashed, hashes, `${hashes} hash(es) for 100 members in ${Object.keys(headers).join(' and ')}, body in three chunks`)
  }
})

t.test('digests are compared with crypto.timingSafeEqual over their whole length, wherever they differ', async (t) => {
  const { app } = await buildApp()
  const compared: Array<[number, number]> = []
  spyOnCrypto(t, 'timingSafeEqual', (original) => ((a: NodeJS.ArrayBufferView, b: NodeJS.ArrayBufferView) => {
    compared.push([a.byteLength, b.byteLength])
    return original(a, b)
  }) as typeof original)
  const digest = createHash('sha256').update(hello).digest()
  for (const at of [0, 15, 31]) {
    const wrong = Buffer.from(digest)
    wrong[at] = (wrong[at] as number) ^ 0xff
    const response = await app.inject({
      method: 'POST', url: '/', payload: hello, headers: { 'content-type': 'application/json', 'content-digest': `sha-256=:${wrong.toString('base64')}:` }
    })
    t.equal(response.statusCode, 400, `differs at byte ${at}`)
  }
  t.same(compared, [[32, 32], [32, 32], [32, 32]])
})
