import { Writable } from 'node:stream'
import t from 'tap'
import Fastify from 'fastify'
import fastifyDigestFields, { type FastifyDigestFieldsOptions } from '../../lib/index.js'
import { hello, helloSha256, json, listen, problemTypes, rawRequest } from '../helpers.js'

// Issue 15, item 3: a field of thousands of members cost quadratic time under the registered shape
// (4,000 keys 55 ms, 24,000 keys 18 s), and was answered with a 193 KB body and a 28.6 KB
// Want-Content-Digest field; item 7: one 16 KiB field wrote a 189 KB log line. Work is now linear
// in the fields' size, and what the plugin sends back or logs is bounded whatever they hold.

// Heavier than most files: more than the runner's 30 s default on a loaded 2-core machine.
t.setTimeout(120_000)

/** A dictionary of `count` unsupported keys, each `key(i)`, with byte-sequence or integer values. */
function field (count: number, value: string, key = (i: number) => `k${i}`): string {
  return Array.from({ length: count }, (_, i) => `${key(i)}=${value}`).join(', ')
}

interface Scenario {
  name: string
  options: FastifyDigestFieldsOptions
  method: 'POST' | 'GET'
  headers: (count: number) => Record<string, string>
}

const scenarios: Scenario[] = [
  { name: 'unsupported keys, registered shape', options: { problemTypes: 'registered' }, method: 'POST', headers: (n) => ({ 'content-digest': field(n, ':AAAA:') }) },
  { name: 'unsupported keys, default shape, strict', options: { strictAlgorithms: true }, method: 'POST', headers: (n) => ({ 'repr-digest': `${helloSha256}, ${field(n, ':AAAA:')}` }) },
  { name: 'unsupported keys beside a supported one, accepted', options: {}, method: 'POST', headers: (n) => ({ 'content-digest': `${field(n, ':AAAA:')}, ${helloSha256}` }) },
  { name: 'preferences, registered shape', options: { problemTypes: 'registered' }, method: 'GET', headers: (n) => ({ 'want-content-digest': field(n, '5'), 'want-repr-digest': field(n, '3') }) }
]

async function appFor (options: FastifyDigestFieldsOptions, serverOptions = {}) {
  const app = Fastify(serverOptions)
  await app.register(fastifyDigestFields, options)
  app.post('/', async () => 'stored')
  app.get('/', async () => 'representation')
  return app
}

// CPU per request within this run, each size measured in batches of about the same total work,
// interleaved over several rounds, the least of each kept (a batch that met a collection of
// another's garbage costs more, never less): the growth from 1,000 to 4,000 members must stay near
// 4 (linear) and far from 16 (quadratic).
t.test('the CPU a request costs grows linearly with the members of its fields', async (t) => {
  const sizes = [100, 1000, 4000]
  for (const scenario of scenarios) {
    const app = await appFor(scenario.options)
    const requests = sizes.map((count) => ({ count, headers: { ...json, ...scenario.headers(count) }, repeat: Math.ceil(20000 / count) }))
    const least = new Map<number, number>()
    for (let round = 0; round < 7; round++) {
      for (const { count, headers, repeat } of round % 2 === 0 ? requests : requests.toReversed()) {
        const start = process.cpuUsage()
        for (let i = 0; i < repeat; i++) {
          await app.inject({ method: scenario.method, url: '/', headers, ...(scenario.method === 'POST' ? { payload: hello } : {}) })
        }
        const used = process.cpuUsage(start)
        const perRequest = (used.user + used.system) / repeat
        if (round > 0) least.set(count, Math.min(least.get(count) ?? Infinity, perRequest))
      }
    }
    const [small, medium, large] = sizes.map((count) => least.get(count) as number) as [number, number, number]
    t.comment(`${scenario.name}: ${[small, medium, large].map((cost) => cost.toFixed(0)).join(', ')} µs a request for 100, 1,000, 4,000 members`)
    t.ok(large / medium < 7, `${scenario.name}: 4,000 members cost ${(large / medium).toFixed(2)}x 1,000 (linear: about 4, quadratic: 16)`)
    t.ok(medium / small < 20, `${scenario.name}: 1,000 members cost ${(medium / small).toFixed(2)}x 100 (linear: at most 10, quadratic: 100)`)
    await app.close()
  }
})

/** Bytes of a raw response's header section and body, as they crossed the socket. */
function sizes (response: { headers: Record<string, string>, body: string }): { head: number, body: number } {
  const head = Object.entries(response.headers).reduce((sum, [name, value]) => sum + name.length + value.length + 4, 0)
  return { head, body: Buffer.byteLength(response.body) }
}

t.test('every answer fits its header section in 8 KiB and its body in 16 KiB, whatever the fields held', async (t) => {
  const requests: Array<[string, FastifyDigestFieldsOptions, Record<string, string>]> = [
    ['24,000 unsupported keys, registered', { problemTypes: 'registered' }, { 'content-digest': field(24000, ':AAAA:') }],
    ['24,000 unsupported keys in three fields, registered', { problemTypes: 'registered' }, {
      'content-digest': field(8000, ':AAAA:'), 'repr-digest': field(8000, ':AAAA:', (i) => `r${i}`), 'unencoded-digest': field(8000, ':AAAA:', (i) => `u${i}`)
    }],
    ['24,000 unsupported preferences in three fields, registered', { problemTypes: 'registered' }, {
      'want-content-digest': field(8000, '1'), 'want-repr-digest': field(8000, '2'), 'want-unencoded-digest': field(8000, '3')
    }],
    ['unsupported keys of 100,000 characters, registered', { problemTypes: 'registered' }, { 'content-digest': field(3, ':AAAA:', (i) => 'k'.repeat(100000 + i)) }],
    ['an unsupported key of 300,000 characters, default shape', {}, { 'content-digest': field(1, ':AAAA:', () => 'k'.repeat(300000)) }],
    ['a preference of 300,000 characters out of range', {}, { 'want-repr-digest': field(1, '11', () => 'k'.repeat(300000)) }],
    ['invalid values of every supported key in three fields, registered', { problemTypes: 'registered', algorithms: ['sha-256', 'sha-512', 'md5', 'sha'] }, {
      'content-digest': 'sha-256=:AAAA:, sha-512=:AAAA:, md5=:AAAA:, sha=:AAAA:',
      'repr-digest': 'sha-256=:AAAA:, sha-512=:AAAA:, md5=:AAAA:, sha=:AAAA:',
      'unencoded-digest': 'sha-256=:AAAA:, sha-512=:AAAA:, md5=:AAAA:, sha=:AAAA:'
    }],
    ['a content coding of 300,000 characters', {}, { 'unencoded-digest': helloSha256, 'content-encoding': 'x'.repeat(300000) }]
  ]
  for (const [name, options, headers] of requests) {
    const lines: string[] = []
    const app = await appFor(options, {
      http: { maxHeaderSize: 1024 * 1024 },
      logger: { level: 'info', stream: new Writable({ write (chunk, _encoding, callback) { lines.push(String(chunk)); callback() } }) }
    })
    const port = await listen(app)
    const response = await rawRequest(port, [
      'POST / HTTP/1.1', 'Host: localhost', 'Content-Type: application/json', `Content-Length: ${hello.length}`,
      ...Object.entries(headers).map(([key, value]) => `${key}: ${value}`)
    ], [Buffer.from(hello)])
    await app.close()
    t.equal(response.status, 400, `${name}: refused`)
    t.equal(response.headers['content-type'], 'application/problem+json', name)
    const { head, body } = sizes(response)
    t.ok(head <= 8192, `${name}: a header section of ${head} bytes`)
    t.ok(body <= 16384, `${name}: a body of ${body} bytes`)
    const problem = lines.map((line) => JSON.parse(line)).find((line) => line.problemType !== undefined)
    const logged = Buffer.byteLength(JSON.stringify(problem))
    t.ok(logged <= 4096, `${name}: a log line of ${logged} bytes`)
  }
})

t.test('a long list says how many findings it leaves out, in the document and in the log', async (t) => {
  const lines: Array<Record<string, unknown>> = []
  const app = await appFor({ problemTypes: 'registered' }, {
    logger: { level: 'info', stream: new Writable({ write (chunk, _encoding, callback) { lines.push(JSON.parse(String(chunk))); callback() } }) }
  })
  const response = await app.inject({
    method: 'POST', url: '/', payload: hello, headers: { ...json, 'content-digest': field(4000, ':AAAA:'), 'want-repr-digest': 'md5=3' }
  })
  t.equal(response.statusCode, 400)
  const listed = Array.from({ length: 10 }, (_, i) => ({ algorithm: `k${i}`, header: 'Content-Digest' }))
  t.same(response.json(), {
    type: problemTypes + 'digest-unsupported-algorithms',
    title: 'Unsupported Hashing Algorithms',
    detail: '3991 more not listed',
    unsupported_algorithms: listed
  })
  t.equal(response.headers['want-content-digest'], `sha-256=10, sha-512=9, ${listed.map(({ algorithm }) => `${algorithm}=0`).join(', ')}`)
  t.equal(response.headers['want-repr-digest'], 'sha-256=10, sha-512=9', 'a field whose keys are not listed still advertises what is supported')
  const line = lines.find((entry) => entry.problemType !== undefined)
  t.same(line?.digestFields, listed.map(({ algorithm, header }) => ({ field: header, algorithm })))
  t.equal(line?.digestFieldsNotListed, 3991)
  t.match(line?.msg, /Content-Digest k9, and 3991 more not listed$/)
})

t.test('a key too long to repeat is not repeated, and the answer says why', async (t) => {
  const app = await appFor({})
  const long = 'k'.repeat(65)
  const response = await app.inject({ method: 'POST', url: '/', payload: hello, headers: { ...json, 'content-digest': `${long}=:AAAA:` } })
  t.same(response.json(), { type: problemTypes + 'digest-unsupported-algorithm', title: 'Unsupported Hashing Algorithm', detail: 'the key is over 64 characters long' })
  t.equal(response.headers['want-content-digest'], 'sha-256=10, sha-512=9')
  const exact = 'k'.repeat(64)
  const listed = await app.inject({ method: 'POST', url: '/', payload: hello, headers: { ...json, 'content-digest': `${exact}=:AAAA:` } })
  t.equal(listed.json()['unsupported-algorithm'], exact, 'a key of 64 characters is repeated')
  const preference = await app.inject({ method: 'GET', url: '/', headers: { 'want-repr-digest': `${long}=11` } })
  t.equal(preference.json().detail, `Want-Repr-Digest gives ${'k'.repeat(64)}… a preference that is not an integer from 0 to 10`)
})
