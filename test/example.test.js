// The README's example upload API, over a real socket: a file is kept only when its digest matched.
import { createHash, randomBytes } from 'node:crypto'
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { request } from 'undici'
import { buildServer } from '../examples/upload-server.js'

const sha512 = (data) => `sha-512=:${createHash('sha512').update(data).digest('base64')}:`

t.test('the example keeps an upload only when its digest matched', async (t) => {
  const uploadDir = await mkdtemp(join(tmpdir(), 'digest-example-'))
  const app = await buildServer({ uploadDir, logger: false })
  await app.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(async () => {
    await app.close()
    await rm(uploadDir, { recursive: true, force: true })
  })
  const url = `http://127.0.0.1:${app.server.address().port}`
  const body = randomBytes(3 * 1024 * 1024)
  const headers = { 'content-type': 'application/octet-stream' }

  const kept = await request(`${url}/uploads/kept.bin`, { method: 'PUT', body, headers: { ...headers, 'repr-digest': sha512(body) } })
  t.equal(kept.statusCode, 201)
  t.same((await kept.body.json()).verified, { fields: ['repr-digest'], values: { 'sha-512': `:${createHash('sha512').update(body).digest('base64')}:` } })

  const corrupted = await request(`${url}/uploads/dropped.bin`, { method: 'PUT', body, headers: { ...headers, 'repr-digest': sha512(body.subarray(1)) } })
  t.equal(corrupted.statusCode, 400)
  t.equal((await corrupted.body.json()).type, 'https://iana.org/assignments/http-problem-types#digest-mismatching-value')

  const unsigned = await request(`${url}/uploads/unsigned.bin`, { method: 'PUT', body, headers })
  t.equal(unsigned.statusCode, 400, 'the upload route requires an integrity field')
  t.equal(unsigned.headers['want-repr-digest'], 'sha-256=10, sha-512=9')
  await unsigned.body.dump()

  t.same(await readdir(uploadDir), ['kept.bin'], 'no partial or unverified file is left')
  t.ok((await readFile(join(uploadDir, 'kept.bin'))).equals(body))

  const item = await request(`${url}/items`, { method: 'POST', body: '{"hello": "world"}', headers: { 'content-type': 'application/json', 'content-digest': 'sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:' } })
  t.equal(item.statusCode, 201)
  t.same((await item.body.json()).item, { hello: 'world' })
  const health = await request(`${url}/health`, { headers: { 'want-repr-digest': 'md5=5' } })
  t.equal(health.statusCode, 200, 'the health route is not covered')
  await health.body.dump()
})
