import t from 'tap'
import Fastify from 'fastify'
import fastifyDigestFields, { digestProblemSchemas, type FastifyDigestFieldsOptions } from '../../lib/index.js'
import { hello, helloSha256, json, member, problemTypes } from '../helpers.js'

// The three types registered with IANA (registered-problem-types.md), selected with
// problemTypes: 'registered', beside the default shape of problem-types.md.

async function app (options: FastifyDigestFieldsOptions) {
  const instance = Fastify()
  await instance.register(fastifyDigestFields, options)
  let handled = 0
  instance.post('/', async () => { handled++; return 'ok' })
  return { instance, handled: () => handled }
}

const md5 = 'md5=:XrY7u+Ae7tCTyyK7j1rNww==:'
const sha512of32 = `sha-512=:${Buffer.alloc(32, 1).toString('base64')}:`

t.test('the examples of registered-problem-types.md', async (t) => {
  const { instance, handled } = await app({ problemTypes: 'registered', algorithms: ['sha-512'] })
  const send = (headers: Record<string, string>) => instance.inject({ method: 'POST', url: '/', payload: hello, headers: { ...json, ...headers } })

  const unsupported = await send({ 'repr-digest': md5, 'content-digest': md5 })
  t.equal(unsupported.statusCode, 400)
  t.equal(unsupported.headers['content-type'], 'application/problem+json')
  t.equal(unsupported.headers['want-repr-digest'], 'sha-512=10, md5=0')
  t.equal(unsupported.headers['want-content-digest'], 'sha-512=10, md5=0')
  const document = unsupported.json()
  // Entries follow the plugin's field order (Content-Digest, Repr-Digest, Unencoded-Digest, then
  // the Want-* fields), not the request's.
  t.same({ ...document, unsupported_algorithms: document.unsupported_algorithms.toSorted((a: { header: string }, b: { header: string }) => a.header.localeCompare(b.header)) }, {
    type: 'https://iana.org/assignments/http-problem-types#digest-unsupported-algorithms',
    title: 'Unsupported Hashing Algorithms',
    unsupported_algorithms: [{ algorithm: 'md5', header: 'Content-Digest' }, { algorithm: 'md5', header: 'Repr-Digest' }]
  })

  t.same((await send({ 'repr-digest': sha512of32 })).json(), {
    type: 'https://iana.org/assignments/http-problem-types#digest-invalid-values',
    title: 'Invalid Digest Values',
    invalid_digests: [{ algorithm: 'sha-512', header: 'Repr-Digest', reason: 'digest value is not 64 bytes long' }]
  })

  const sent = member('sha-512', 'not the content')
  t.same((await send({ 'content-digest': sent })).json(), {
    type: 'https://iana.org/assignments/http-problem-types#digest-mismatched-values',
    title: 'Mismatched Digest Values',
    mismatched_digests: [{ algorithm: 'sha-512', provided_digest: sent.slice('sha-512='.length), header: 'Content-Digest' }]
  })
  t.equal(handled(), 0)
})

t.test('one response lists every problem of its kind, each with its field', async (t) => {
  const { instance } = await app({ problemTypes: 'registered', strictAlgorithms: true })
  const send = (headers: Record<string, string>) => instance.inject({ method: 'POST', url: '/', payload: hello, headers: { ...json, ...headers } })
  const unsupported = (await send({
    'content-digest': `md5=:AAAA:, ${helloSha256}, foo=:AAAA:`,
    'want-repr-digest': 'sha=3, sha-256=1',
    'want-unencoded-digest': 'crc32c=5, md5=0'
  })).json()
  t.same(unsupported.unsupported_algorithms, [
    { algorithm: 'md5', header: 'Content-Digest' },
    { algorithm: 'foo', header: 'Content-Digest' },
    { algorithm: 'sha', header: 'Want-Repr-Digest' },
    { algorithm: 'crc32c', header: 'Want-Unencoded-Digest' }
  ])
  const invalid = await send({ 'content-digest': 'sha-256=:AAAA:, sha-512=?1', 'repr-digest': 'sha-256=(:AAAA:)' })
  t.same(invalid.json().invalid_digests, [
    { algorithm: 'sha-256', header: 'Content-Digest', reason: 'digest value is not 32 bytes long' },
    { algorithm: 'sha-512', header: 'Content-Digest', reason: 'digest value is not a byte sequence' },
    { algorithm: 'sha-256', header: 'Repr-Digest', reason: 'digest value is not a byte sequence' }
  ])
  const wrong256 = member('sha-256', 'x')
  const wrong512 = member('sha-512', 'y')
  const mismatched = await send({ 'content-digest': `${wrong256}, ${wrong512}`, 'repr-digest': helloSha256, 'unencoded-digest': wrong256 })
  t.same(mismatched.json().mismatched_digests, [
    { algorithm: 'sha-256', provided_digest: wrong256.slice(8), header: 'Content-Digest' },
    { algorithm: 'sha-512', provided_digest: wrong512.slice(8), header: 'Content-Digest' },
    { algorithm: 'sha-256', provided_digest: wrong256.slice(8), header: 'Unencoded-Digest' }
  ])
})

t.test('which kind wins when a request has several: unparsable, then unsupported, then invalid, then mismatched', async (t) => {
  for (const problemTypesOption of ['draft-00', 'registered'] as const) {
    const { instance } = await app({ problemTypes: problemTypesOption })
    const send = (headers: Record<string, string>) => instance.inject({ method: 'POST', url: '/', payload: hello, headers: { ...json, ...headers } })
    const plural = problemTypesOption === 'registered'
    const type = (singular: string, registered: string): string => problemTypes + (plural ? registered : singular)
    t.equal((await send({ 'content-digest': 'sha-256=:AAAA:', 'repr-digest': md5, 'want-content-digest': '=' })).json().type, 'about:blank')
    t.equal((await send({ 'content-digest': 'sha-256=:AAAA:', 'repr-digest': md5 })).json().type, type('digest-unsupported-algorithm', 'digest-unsupported-algorithms'))
    t.equal((await send({ 'content-digest': member('sha-256', 'x'), 'repr-digest': 'sha-512=:AAAA:' })).json().type, type('digest-invalid-value', 'digest-invalid-values'))
    t.equal((await send({ 'content-digest': member('sha-256', 'x') })).json().type, type('digest-mismatching-value', 'digest-mismatched-values'))
  }
})

t.test('a route picks its own shape', async (t) => {
  const instance = Fastify()
  await instance.register(fastifyDigestFields)
  instance.post('/draft', async () => 'ok')
  instance.post('/registered', { config: { digest: { problemTypes: 'registered' } } }, async () => 'ok')
  const send = (url: string) => instance.inject({ method: 'POST', url, payload: hello, headers: { ...json, 'content-digest': md5 } })
  t.equal((await send('/draft')).json().type, problemTypes + 'digest-unsupported-algorithm')
  t.equal((await send('/registered')).json().type, problemTypes + 'digest-unsupported-algorithms')
  await t.rejects(async () => { await Fastify().register(fastifyDigestFields, { problemTypes: 'plural' as 'registered' }) }, /problemTypes must be one of draft-00, registered, got 'plural'/)
})

t.test('disclosure applies to both shapes alike, and the registered shape never carries a calculated digest', async (t) => {
  const mismatch = { 'content-digest': member('sha-256', 'x') }
  for (const disclosure of ['full', 'no-calculated-digest', 'none'] as const) {
    for (const shape of ['draft-00', 'registered'] as const) {
      const { instance } = await app({ problemTypes: shape, disclosure })
      const document = (await instance.inject({ method: 'POST', url: '/', payload: hello, headers: { ...json, ...mismatch } })).json()
      if (disclosure === 'none') {
        t.same(document, { type: 'about:blank', title: 'Bad Request' }, `${shape}, ${disclosure}`)
      } else if (shape === 'draft-00') {
        t.equal('calculated-digest' in document, disclosure === 'full', `${shape}, ${disclosure}`)
      } else {
        t.notOk(JSON.stringify(document).includes('calculated'), `${shape}, ${disclosure}`)
        t.same(Object.keys(document.mismatched_digests[0]).sort(), ['algorithm', 'header', 'provided_digest'])
      }
    }
  }
})

t.test('every registered problem is valid against its exported schema', async (t) => {
  const { instance } = await app({ problemTypes: 'registered' })
  const checker = Fastify()
  for (const [name, schema] of Object.entries(digestProblemSchemas)) {
    checker.post(`/${name}`, { schema: { body: { ...schema, additionalProperties: false } } }, async () => 'valid')
  }
  const cases: Array<[keyof typeof digestProblemSchemas, Record<string, string>]> = [
    ['unsupportedAlgorithms', { 'content-digest': md5 }],
    ['invalidValues', { 'content-digest': 'sha-256=:AAAA:' }],
    ['mismatchedValues', { 'content-digest': member('sha-256', 'x') }],
    ['general', { 'content-digest': '=' }]
  ]
  for (const [name, headers] of cases) {
    const problem = await instance.inject({ method: 'POST', url: '/', payload: hello, headers: { ...json, ...headers } })
    const checked = await checker.inject({ method: 'POST', url: `/${name}`, payload: problem.body, headers: json })
    t.equal(checked.body, 'valid', `${name}: ${problem.body}`)
  }
})
