// The README's example upload API, over a real socket: a file is kept only when its digest matched.
import { spawn } from 'node:child_process'
import { createHash, randomBytes } from 'node:crypto'
import { copyFile, mkdir, mkdtemp, readdir, readFile, rm, symlink } from 'node:fs/promises'
import { request as httpRequest } from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { request } from 'undici'
import { buildServer } from '../../examples/upload-server.js'

const sha512 = (data) => `sha-512=:${createHash('sha512').update(data).digest('base64')}:`

async function started (t) {
  const uploadDir = await mkdtemp(join(tmpdir(), 'digest-example-'))
  const app = await buildServer({ uploadDir, logger: false })
  await app.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(async () => {
    await app.close()
    await rm(uploadDir, { recursive: true, force: true })
  })
  return { uploadDir, url: `http://127.0.0.1:${app.server.address().port}` }
}

t.test('the example keeps an upload only when its digest matched', async (t) => {
  const { uploadDir, url } = await started(t)
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

t.test('no upload name writes outside the upload folder or answers 5xx', async (t) => {
  // Before, PUT /uploads/.. with a correct digest answered 500 with absolute server paths and left
  // .partial files behind.
  const { uploadDir, url } = await started(t)
  const body = Buffer.from('content')
  for (const name of ['..', '.', '.hidden', '%2e%2e', '..%2f..%2fescaped', 'a%00b', 'x'.repeat(200)]) {
    // node:http sends the path as written, where undici would resolve the dot segments.
    const { status, text } = await new Promise((resolve, reject) => {
      const sent = httpRequest(`${url}/uploads/${name}`, { method: 'PUT', headers: { 'repr-digest': sha512(body) } }, (response) => {
        let text = ''
        response.on('data', (chunk) => { text += chunk })
        response.on('end', () => resolve({ status: response.statusCode, text }))
      })
      sent.on('error', reject)
      sent.end(body)
    })
    t.ok(status >= 400 && status < 500, `${name.slice(0, 20)}: ${status}`)
    t.notMatch(text, uploadDir, 'no server path in the answer')
  }
  t.same(await readdir(uploadDir), [])
  t.same((await readdir(join(uploadDir, '..'))).filter((entry) => entry === 'escaped'), [])
})

t.test('an upload is kept whatever its content type, and only with a verified digest', async (t) => {
  // Before, a PUT without Content-Type or with application/json answered 500, and an empty body
  // without a digest was kept although the route requires one.
  const { uploadDir, url } = await started(t)
  const body = Buffer.from('{"not": "parsed"}')
  for (const type of [undefined, 'application/json', 'text/plain; charset=utf-8', 'multipart/form-data; boundary=x', 'x/y']) {
    const name = `typed-${type === undefined ? 'none' : type.replace(/\W/g, '_')}`
    const headers = { 'repr-digest': sha512(body), ...(type === undefined ? {} : { 'content-type': type }) }
    const response = await request(`${url}/uploads/${name}`, { method: 'PUT', body, headers })
    t.equal(response.statusCode, 201, String(type))
    await response.body.dump()
    t.ok((await readFile(join(uploadDir, name))).equals(body))
  }
  const empty = await request(`${url}/uploads/empty`, { method: 'PUT', body: '', headers: {} })
  t.equal(empty.statusCode, 400, 'an empty upload without a digest is refused')
  await empty.body.dump()
  const emptyVerified = await request(`${url}/uploads/empty`, { method: 'PUT', body: '', headers: { 'content-digest': sha512('') } })
  t.equal(emptyVerified.statusCode, 201, 'an empty upload with the digest of empty content is kept')
  await emptyVerified.body.dump()
  t.equal((await readdir(uploadDir)).filter((entry) => entry.endsWith('.partial')).length, 0)
})

t.test('concurrent uploads to one name never mix', async (t) => {
  // Before, two uploads to one name shared one temporary file: the kept file matched neither
  // upload in 7 of 10 tries.
  const { uploadDir, url } = await started(t)
  const uploads = Array.from({ length: 8 }, (_, i) => randomBytes(512 * 1024 + i))
  const responses = await Promise.all(uploads.map((body) =>
    request(`${url}/uploads/shared.bin`, { method: 'PUT', body, headers: { 'content-digest': sha512(body) } })))
  for (const response of responses) {
    t.equal(response.statusCode, 201)
    await response.body.dump()
  }
  const kept = await readFile(join(uploadDir, 'shared.bin'))
  t.ok(uploads.some((body) => body.equals(kept)), 'the kept file is one whole upload')
  t.same(await readdir(uploadDir), ['shared.bin'], 'no temporary file is left')
})

t.test('the example never answers 5xx, whatever the path, method or content type', async (t) => {
  const { url } = await started(t)
  const seed = Number(process.env.DIGEST_FUZZ_SEED ?? Date.now() % 1e9)
  t.comment(`seed ${seed} (DIGEST_FUZZ_SEED replays it)`)
  let x = seed | 1
  const pick = (list) => {
    x ^= x << 13
    x ^= x >>> 17
    x ^= x << 5
    return list[(x >>> 0) % list.length]
  }
  const paths = ['/', '/items', '/uploads/a', '/uploads/', '/uploads/..', '/uploads/a/b', '/health', '/nope', '/items?x=1']
  const methods = ['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS']
  const types = [undefined, 'application/json', 'text/plain', 'application/octet-stream', 'multipart/form-data', '*/*', 'x']
  const bodies = ['', '{"hello": "world"}', '{', 'plain']
  const statuses = new Map()
  for (let i = 0; i < 150; i++) {
    const method = pick(methods)
    const body = method === 'GET' || method === 'HEAD' ? undefined : pick(bodies)
    const type = pick(types)
    const headers = {
      ...(type === undefined ? {} : { 'content-type': type }),
      ...(body === undefined ? {} : { 'content-digest': pick([sha512(body), sha512('other'), 'sha-256=:AAAA:', 'md5=:AAAA:']) })
    }
    const response = await request(`${url}${pick(paths)}`, { method, body, headers })
    await response.body.dump()
    statuses.set(response.statusCode, (statuses.get(response.statusCode) ?? 0) + 1)
    if (response.statusCode >= 500) t.fail(`${method} ${type} answered ${response.statusCode}`)
  }
  t.ok([...statuses.keys()].every((status) => status < 500), `statuses: ${JSON.stringify(Object.fromEntries(statuses))}`)
})

t.test('npm start serves from a checkout whose path has a space', async (t) => {
  // Before, the example compared its own URL with process.argv[1] and exited silently there.
  const checkout = await mkdtemp(join(tmpdir(), 'a checkout '))
  t.teardown(() => rm(checkout, { recursive: true, force: true }))
  const root = fileURLToPath(new URL('../..', import.meta.url))
  await mkdir(join(checkout, 'examples'))
  await mkdir(join(checkout, 'node_modules'))
  await copyFile(join(root, 'examples', 'upload-server.js'), join(checkout, 'examples', 'upload-server.js'))
  await symlink(root, join(checkout, 'node_modules', 'fastify-digest-fields'))
  await symlink(join(root, 'node_modules', 'fastify'), join(checkout, 'node_modules', 'fastify'))
  const server = spawn(process.execPath, [join(checkout, 'examples', 'upload-server.js')], {
    // Its upload folder goes inside the checkout, which the teardown removes.
    env: { ...process.env, PORT: '0', TMPDIR: checkout }
  })
  t.teardown(() => server.kill())
  const lines = createInterface({ input: server.stdout })
  let address
  for await (const line of lines) {
    address = /Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(line)?.[1]
    if (address !== undefined) break
  }
  const health = await request(`${address}/health`)
  t.equal(health.statusCode, 200)
  t.same(await health.body.json(), { status: 'ok' })
})

t.test('a download answers Want-Repr-Digest with the digest stored at upload, GET and HEAD', async (t) => {
  const { url } = await started(t)
  const body = randomBytes(256 * 1024)
  const upload = await request(`${url}/uploads/kept.bin`, { method: 'PUT', body, headers: { 'repr-digest': sha512(body) } })
  t.equal(upload.statusCode, 201)
  await upload.body.dump()
  const download = await request(`${url}/uploads/kept.bin`, { headers: { 'want-repr-digest': 'sha-512=5' } })
  t.equal(download.statusCode, 200)
  t.equal(download.headers['repr-digest'], sha512(body), 'the stored digest, in the header section: no hashing')
  t.equal(download.headers['unencoded-digest'], sha512(body), 'sent unasked, for browsers: the stored digest too')
  t.ok(Buffer.from(await download.body.arrayBuffer()).equals(body))
  const head = await request(`${url}/uploads/kept.bin`, { method: 'HEAD', headers: { 'want-repr-digest': 'sha-512=5' } })
  t.equal(head.headers['repr-digest'], sha512(body))
  await head.body.dump()
  // An algorithm nothing stored: the plugin hashes the file before sending it (file-digests.ts),
  // so the field is in the header section too.
  const other = await request(`${url}/uploads/kept.bin`, { headers: { 'want-repr-digest': 'sha-256=5' } })
  const received = Buffer.from(await other.body.arrayBuffer())
  t.equal(other.headers['repr-digest'], `sha-256=:${createHash('sha256').update(received).digest('base64')}:`)
  t.ok(received.equals(body))
  const missing = await request(`${url}/uploads/missing.bin`)
  t.equal(missing.statusCode, 404)
  await missing.body.dump()
})
