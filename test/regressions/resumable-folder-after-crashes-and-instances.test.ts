// Issue 27: what an attack on the example resumable server's folder found, given only the README,
// the docs and the examples, each pinned here. The oracles: the bytes the test sent and Node's
// createHash over them.
import { createHash } from 'node:crypto'
import { appendFileSync, mkdtempSync, readFileSync, rmSync, utimesSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import type { FastifyInstance } from 'fastify'
import { request } from 'undici'
import { listen, lockHeld, rawConnection, seededBytes, type Tap } from '../helpers.js'

const { buildServer } = await import('../../examples/resumable-upload-server.js' as string) as {
  buildServer: (options: { uploadDir: string, logger: boolean }) => Promise<FastifyInstance>
}
const sha256 = (data: Buffer): string => createHash('sha256').update(data).digest('base64')
const partial = { 'content-type': 'application/partial-upload' }

async function server (t: Tap, uploadDir: string): Promise<{ origin: string, port: number }> {
  const app = await buildServer({ uploadDir, logger: false })
  t.teardown(async () => await app.close())
  const port = await listen(app)
  return { origin: `http://127.0.0.1:${port}`, port }
}

function folder (t: Tap): string {
  const path = mkdtempSync(join(tmpdir(), 'resumable-crashes-'))
  t.teardown(() => rmSync(path, { recursive: true, force: true }))
  return path
}

async function create (origin: string, data: Buffer, first: number): Promise<{ location: string, id: string }> {
  const created = await request(`${origin}/resumable`, { method: 'POST', headers: { 'upload-complete': '?0', 'repr-digest': `sha-256=:${sha256(data)}:` }, body: data.subarray(0, first) })
  await created.body.dump()
  const location = created.headers.location as string
  return { location, id: location.split('/').pop() as string }
}

t.test('F1: bytes a server stopped mid-append wrote past the stored offset are not kept by a later append', async (t) => {
  const uploadDir = folder(t)
  const { origin } = await server(t, uploadDir)
  const data = seededBytes(2000, 31)
  const { location, id } = await create(origin, data, 1000)
  // What a server killed while it streamed an append leaves: the file longer than the stored offset.
  appendFileSync(join(uploadDir, `${id}.part`), Buffer.alloc(290_000, 'junk'))
  const head = await request(origin + location, { method: 'HEAD' })
  t.equal(head.headers['upload-offset'], '1000', 'the offset is the stored one')
  const completed = await request(origin + location, {
    method: 'PATCH', headers: { ...partial, 'upload-offset': '1000', 'upload-complete': '?1' }, body: data.subarray(1000)
  })
  t.equal(completed.statusCode, 200)
  t.equal((await completed.body.json() as { digests: Record<string, string> }).digests['sha-256'], sha256(data))
  t.ok(readFileSync(join(uploadDir, id)).equals(data), 'the completed file is the bytes whose digest was verified')
})

t.test('F2: two servers in one process on one folder take an upload\'s requests one at a time', async (t) => {
  const uploadDir = folder(t)
  const [x, y] = [await server(t, uploadDir), await server(t, uploadDir)]
  const data = seededBytes(200_000, 32)
  const { location, id } = await create(x.origin, data, 1000)
  await lockHeld(uploadDir, id, null)
  // An append half sent to X, held there; the client resumes on Y, in the same process.
  const { socket, answered: ended } = await rawConnection(x.port)
  socket.write([`PATCH ${location} HTTP/1.1`, 'Host: localhost', 'Content-Type: application/partial-upload', 'Upload-Offset: 1000',
    'Upload-Complete: ?1', `Content-Length: ${data.length - 1000}`, '', ''].join('\r\n'))
  socket.write(data.subarray(1000, 50_000))
  await lockHeld(uploadDir, id, process.pid)
  const head = await request(y.origin + location, { method: 'HEAD' })
  t.match(await ended, /^(409|closed)$/, 'the request on X was ended by the one on Y')
  socket.destroy()
  const offset = Number(head.headers['upload-offset'])
  t.ok(offset >= 1000 && offset <= 50_000, `resumed at ${offset}`)
  const completed = await request(y.origin + location, {
    method: 'PATCH', headers: { ...partial, 'upload-offset': String(offset), 'upload-complete': '?1' }, body: data.subarray(offset)
  })
  t.equal(completed.statusCode, 200)
  await completed.body.dump()
  t.ok(readFileSync(join(uploadDir, id)).equals(data), 'the file is the bytes sent')
})

t.test('F3: a lock that names a live process but nobody renews is taken over, not answered 503 for ever', async (t) => {
  const uploadDir = folder(t)
  const { origin } = await server(t, uploadDir)
  const data = seededBytes(3000, 33)
  const { location, id } = await create(origin, data, 1000)
  await lockHeld(uploadDir, id, null)
  // A lock left by a process whose pid now belongs to a live one (this test's parent), last renewed a minute ago.
  const lock = join(uploadDir, '.locks', `${id}.lock`)
  writeFileSync(lock, JSON.stringify({ pid: process.ppid, instance: 'gone', token: 'gone' }))
  const minuteAgo = new Date(Date.now() - 60_000)
  utimesSync(lock, minuteAgo, minuteAgo)
  const head = await request(origin + location, { method: 'HEAD' })
  t.equal(head.statusCode, 204)
  t.equal(head.headers['upload-offset'], '1000')
})
