import t from 'tap'
import { buildApp, hello, helloSha256, helloSha512, json, member, problemTypes } from '../helpers.js'

t.test('answers a field that does not parse with about:blank naming the field, never digest-invalid-value', async (t) => {
  const { app, calls } = await buildApp()
  const broken: Array<[string, string, string]> = [
    ['content-digest', 'sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=', 'Content-Digest'],
    ['repr-digest', 'sha-256=:a:', 'Repr-Digest'],
    ['content-digest', 'SHA-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:', 'Content-Digest'],
    ['want-content-digest', 'sha-256=1,', 'Want-Content-Digest'],
    ['want-repr-digest', 'sha-256=é', 'Want-Repr-Digest']
  ]
  for (const [field, value, name] of broken) {
    const response = await app.inject({ method: 'POST', url: '/', payload: hello, headers: { ...json, [field]: value } })
    t.equal(response.statusCode, 400, `${name}: ${value}`)
    t.equal(response.headers['content-type'], 'application/problem+json')
    const problem = response.json()
    t.equal(problem.type, 'about:blank')
    t.equal(problem.title, 'Bad Request')
    t.match(problem.detail, new RegExp(`^${name} is not a valid structured-field dictionary: Parse error: .+ at offset \\d+$`))
  }
  t.equal(calls.handler, 0)
})

t.test('rejects a sha-512 value that is not 64 bytes', async (t) => {
  const { app, calls } = await buildApp()
  const response = await app.inject({
    method: 'POST', url: '/', payload: hello, headers: { ...json, 'content-digest': `sha-512=:${Buffer.alloc(63).toString('base64')}:` }
  })
  t.equal(response.statusCode, 400)
  t.same(response.json(), { type: problemTypes + 'digest-invalid-value', title: 'digest value for sha-512 is not 64 bytes long' })
  t.equal(calls.handler, 0)
})

t.test('rejects a sha-256 value that is not 32 bytes, even a sha-512 digest', async (t) => {
  const { app } = await buildApp()
  const response = await app.inject({
    method: 'POST', url: '/', payload: hello, headers: { ...json, 'repr-digest': helloSha512.replace('sha-512', 'sha-256') }
  })
  t.same(response.json(), { type: problemTypes + 'digest-invalid-value', title: 'digest value for sha-256 is not 32 bytes long' })
})

t.test('rejects a digest value that is not a byte sequence', async (t) => {
  const { app } = await buildApp()
  for (const value of ['sha-256=abc', 'sha-256=1', 'sha-256="X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE="', 'sha-256=(:AAAA:)', 'sha-256']) {
    const response = await app.inject({ method: 'POST', url: '/', payload: hello, headers: { ...json, 'content-digest': value } })
    t.same(response.json(), { type: problemTypes + 'digest-invalid-value', title: 'digest value for sha-256 is not a byte sequence' }, value)
  }
})

t.test('judges invalid values before the body is read', async (t) => {
  const { app, calls } = await buildApp()
  // A mismatching Content-Digest would need the body; the invalid Repr-Digest answers first.
  const response = await app.inject({
    method: 'POST', url: '/', payload: hello, headers: { ...json, 'content-digest': member('sha-256', 'x'), 'repr-digest': 'sha-512=:AAAA:' }
  })
  t.equal(response.json().type, problemTypes + 'digest-invalid-value')
  t.equal(calls.handler, 0)
})

t.test('ignores parameters on digest values', async (t) => {
  const { app } = await buildApp()
  const response = await app.inject({ method: 'POST', url: '/', payload: hello, headers: { ...json, 'content-digest': `${helloSha256};note="x"` } })
  t.equal(response.statusCode, 200)
})

t.test('the last of duplicated keys counts, as RFC 9651 section 4.2.2 says', async (t) => {
  const { app } = await buildApp()
  const response = await app.inject({
    method: 'POST', url: '/', payload: hello, headers: { ...json, 'content-digest': `${member('sha-256', 'x')}, ${helloSha256}` }
  })
  t.equal(response.statusCode, 200)
})

t.test('an empty field names nothing and asks for nothing', async (t) => {
  const { app } = await buildApp()
  const response = await app.inject({ method: 'POST', url: '/', payload: hello, headers: { ...json, 'content-digest': '', 'want-repr-digest': '' } })
  t.equal(response.statusCode, 200)
  t.equal(response.json().digest, null)
})

t.test('rejects an unsupported algorithm in an integrity field and advertises the supported ones', async (t) => {
  const { app, calls } = await buildApp()
  const content = await app.inject({ method: 'POST', url: '/', payload: hello, headers: { ...json, 'content-digest': 'md5=:XrY7u+Ae7tCTyyK7j1rNww==:' } })
  t.equal(content.statusCode, 400)
  t.same(content.json(), {
    type: problemTypes + 'digest-unsupported-algorithm',
    title: 'Unsupported Hashing Algorithm',
    'unsupported-algorithm': 'md5'
  })
  t.equal(content.headers['want-content-digest'], 'sha-256=10, sha-512=9, md5=0')
  t.notOk('want-repr-digest' in content.headers)

  const repr = await app.inject({ method: 'POST', url: '/', payload: hello, headers: { ...json, 'repr-digest': 'foo=:AAAA:' } })
  t.equal(repr.json()['unsupported-algorithm'], 'foo')
  t.equal(repr.headers['want-repr-digest'], 'sha-256=10, sha-512=9, foo=0')
  t.notOk('want-content-digest' in repr.headers)
  t.equal(calls.handler, 0)
})

t.test('rejects an unsupported algorithm in a preference field of a bodiless request', async (t) => {
  const { app } = await buildApp()
  let handled = 0
  app.get('/resource', async () => { handled++; return 'representation' })
  const response = await app.inject({ method: 'GET', url: '/resource', headers: { 'want-repr-digest': 'sha=10' } })
  t.equal(response.statusCode, 400)
  t.same(response.json(), { type: problemTypes + 'digest-unsupported-algorithm', title: 'Unsupported Hashing Algorithm', 'unsupported-algorithm': 'sha' })
  t.equal(response.headers['want-repr-digest'], 'sha-256=10, sha-512=9, sha=0')

  const content = await app.inject({ method: 'GET', url: '/resource', headers: { 'want-content-digest': 'unixsum=1' } })
  t.equal(content.headers['want-content-digest'], 'sha-256=10, sha-512=9, unixsum=0')
  t.equal(handled, 0)
})

t.test('a preference of 0 for an unknown key asks for nothing and is never a reason to reject', async (t) => {
  const lenient = await buildApp()
  const strict = await buildApp({ strictAlgorithms: true })
  for (const { app } of [lenient, strict]) {
    app.get('/resource', async () => 'representation')
    for (const value of ['md5=0', 'unixsum=0, sha-256=0', 'md5=0, sha-512=3']) {
      const response = await app.inject({ method: 'GET', url: '/resource', headers: { 'want-repr-digest': value, 'want-content-digest': value } })
      t.equal(response.statusCode, 200, value)
    }
  }
})

t.test('by default a field is rejected only when it names no supported algorithm', async (t) => {
  const { app } = await buildApp()
  const mixed = await app.inject({ method: 'POST', url: '/', payload: hello, headers: { ...json, 'content-digest': `md5=:AAAA:, ${helloSha256}` } })
  t.equal(mixed.statusCode, 200)
  t.same(Object.keys(mixed.json().digest.values), ['sha-256'])

  const want = await app.inject({ method: 'POST', url: '/', payload: hello, headers: { ...json, 'want-content-digest': 'md5=10, sha-512=1' } })
  t.equal(want.statusCode, 200)

  const wantOnlyUnsupported = await app.inject({ method: 'POST', url: '/', payload: hello, headers: { ...json, 'want-content-digest': 'md5=10, sha-512=0' } })
  t.equal(wantOnlyUnsupported.json()['unsupported-algorithm'], 'md5')
})

t.test('strictAlgorithms rejects any unsupported key', async (t) => {
  const { app } = await buildApp({ strictAlgorithms: true })
  const mixed = await app.inject({ method: 'POST', url: '/', payload: hello, headers: { ...json, 'content-digest': `${helloSha256}, md5=:AAAA:` } })
  t.equal(mixed.statusCode, 400)
  t.equal(mixed.json()['unsupported-algorithm'], 'md5')
  const want = await app.inject({ method: 'POST', url: '/', payload: hello, headers: { ...json, 'want-repr-digest': 'sha-256=5, adler=1' } })
  t.equal(want.json()['unsupported-algorithm'], 'adler')
  t.equal(want.headers['want-repr-digest'], 'sha-256=10, sha-512=9, adler=0')
})

t.test('a deprecated algorithm is unsupported unless the application lists it', async (t) => {
  const { app } = await buildApp({ algorithms: ['sha-256', 'md5'] })
  const md5 = await app.inject({ method: 'POST', url: '/', payload: hello, headers: { ...json, 'content-digest': member('md5', hello) } })
  t.equal(md5.statusCode, 200)
  t.same(Object.keys(md5.json().digest.values), ['md5'])
  const sha = await app.inject({ method: 'POST', url: '/', payload: hello, headers: { ...json, 'content-digest': member('sha', hello) } })
  t.equal(sha.json()['unsupported-algorithm'], 'sha')
  t.equal(sha.headers['want-content-digest'], 'sha-256=10, md5=9, sha=0')
})

t.test('judges unsupported algorithms before invalid values', async (t) => {
  const { app } = await buildApp()
  const response = await app.inject({
    method: 'POST', url: '/', payload: hello, headers: { ...json, 'content-digest': 'sha-256=:AAAA:', 'want-repr-digest': 'crc32c=2' }
  })
  t.equal(response.json().type, problemTypes + 'digest-unsupported-algorithm')
})

t.test('answers a preference outside 0 to 10 with about:blank naming the field', async (t) => {
  const { app } = await buildApp()
  for (const value of ['sha-256=11', 'sha-256=-1', 'sha-256=1.5', 'sha-256=:AAAA:', 'sha-256=(1 2)', 'sha-256']) {
    const response = await app.inject({ method: 'POST', url: '/', payload: hello, headers: { ...json, 'want-content-digest': value } })
    t.equal(response.statusCode, 400, value)
    t.same(response.json(), {
      type: 'about:blank',
      title: 'Bad Request',
      detail: 'Want-Content-Digest gives sha-256 a preference that is not an integer from 0 to 10'
    }, value)
  }
})
