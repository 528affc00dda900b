import { createHash } from 'node:crypto'
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import type { FastifyInstance } from 'fastify'
import { request } from 'undici'
import { fuzzSeed, listen, lockHeld, problemTypes, rawConnection, rawRequest, seededBytes, seededRandom, serverProcess, stopProcess, whenChanged, type Tap } from '../helpers.js'

// Issue 19, part 3: an upload in several appends is verified as a whole against the Repr-Digest of
// its creation, across server restarts. The oracles are Node's createHash over the bytes the test
// sent (the plugin hashes with hash-wasm), the bytes the example server leaves on disk, and a small
// model of the draft's offsets.

type BuildServer = (options: { uploadDir: string, logger: boolean }) => Promise<FastifyInstance>
const { buildServer } = await import('../../examples/resumable-upload-server.js' as string) as { buildServer: BuildServer }

t.comment(`seed ${fuzzSeed}`)
// Server processes are started and killed before every request: more than tap's 30 s on a busy machine.
t.setTimeout(180_000)
const random = seededRandom(fuzzSeed)
const int = (below: number): number => Math.floor(random() * below)

type Key = 'sha-256' | 'sha-512'
const digestOf = (key: Key, data: Buffer): Buffer => createHash(key.replace('-', '')).update(data).digest()
const member = (key: Key, data: Buffer): string => `${key}=:${digestOf(key, data).toString('base64')}:`

interface Answer { status: number, headers: Record<string, string>, body: string }

async function send (origin: string, method: string, path: string, headers: Record<string, string>, body?: Buffer):
Promise<Answer> {
  const response = await request(origin + path, { method: method as 'PATCH', headers, ...(body === undefined ? {} : { body }) })
  return { status: response.statusCode, headers: response.headers as Record<string, string>, body: await response.body.text() }
}

/** Creates the upload with the first part, or appends a part at `offset`, each with its own Content-Digest. */
async function transfer (origin: string, location: string | null, offset: number, part: Buffer, complete: boolean,
  extra: Record<string, string> = {}): Promise<Answer> {
  const headers = { 'upload-complete': complete ? '?1' : '?0', 'content-digest': member('sha-256', part), ...extra }
  if (location === null) return await send(origin, 'POST', '/resumable', headers, part)
  return await send(origin, 'PATCH', location, {
    'content-type': 'application/partial-upload', 'upload-offset': String(offset), ...headers
  }, part)
}

/** Cut points of data into `parts` parts of random sizes (some empty). */
function cuts (size: number, parts: number): number[] {
  const points = Array.from({ length: parts - 1 }, () => int(size + 1)).sort((a, b) => a - b)
  return [0, ...points, size]
}

function folder (t: Tap): string {
  const path = mkdtempSync(join(tmpdir(), 'resumable-'))
  t.teardown(() => rmSync(path, { recursive: true, force: true }))
  return path
}

t.test('an upload in 1 to 8 appends, the server process killed and started again before each, matches its creation digest', async (t) => {
  const uploadDir = folder(t)
  for (let round = 0; round < 3; round++) {
    const data = seededBytes(int(512 * 1024), int(2 ** 31))
    const parts = 1 + int(8)
    const points = cuts(data.length, parts)
    // One upload in two has one byte flipped in one part, which that part's own Content-Digest covers.
    const flipped = data.length > 0 && round % 2 === 1 ? int(data.length) : null
    const sent = Buffer.from(data)
    if (flipped !== null) sent[flipped] = (sent[flipped] as number) ^ 0x20
    const key: Key = round === 2 ? 'sha-512' : 'sha-256'
    let location: string | null = null
    let last: Answer | null = null
    for (let i = 0; i < parts; i++) {
      const server = await serverProcess(t, ['examples/resumable-upload-server.js'], { UPLOAD_DIR: uploadDir })
      try {
        const complete = i === parts - 1
        const part = sent.subarray(points[i], points[i + 1])
        const extra = location === null ? { 'repr-digest': member(key, data) } : {}
        last = await transfer(server.origin, location, points[i] as number, part, complete, extra)
        location ??= last.headers.location ?? null
        if (!complete) t.equal(last.status, i === 0 ? 201 : 204, `part ${i + 1} of ${parts} taken`)
      } finally {
        await stopProcess(server.child)
      }
    }
    const id = String(location).split('/').pop() as string
    const answer = last as Answer
    t.equal(answer.headers['upload-complete'], '?1', 'the last answer ends the upload')
    if (flipped === null) {
      t.equal(answer.status, 200, `${data.length} bytes in ${parts} parts complete`)
      t.equal(JSON.parse(answer.body).size, data.length)
      t.ok(readFileSync(join(uploadDir, id)).equals(data), 'what is stored is what was sent')
      continue
    }
    t.equal(answer.status, 400, `byte ${flipped} flipped: the upload fails when it completes`)
    const problem = JSON.parse(answer.body)
    t.equal(problem.type, `${problemTypes}digest-mismatching-value`)
    t.equal(problem['provided-digest'], `:${digestOf(key, data).toString('base64')}:`, 'the creation digest is the one compared')
    t.equal(problem['calculated-digest'], `:${digestOf(key, sent).toString('base64')}:`, 'against the digest of every byte received')
    t.notOk(readdirSync(uploadDir).some((name) => name.startsWith(id)), 'nothing of the failed upload is left')
  }
})

interface Model { data: Buffer, offset: number, flipped: boolean, state: 'open' | 'complete' | 'gone' }

/** Resolves once the file at `path` is longer than `size`. */
async function grown (path: string, size: number): Promise<void> {
  await whenChanged(path, () => statSync(path).size > size)
}

/**
 * An append of the rest cut short once its request holds the upload, with or without a Content-Digest
 * of the whole part and now and then a byte flipped; the client then resumes from the offset HEAD or
 * GET gives, which may keep a prefix of what was sent, none of it when the append carried its digest.
 */
async function interrupt (t: Tap, origin: string, uploadDir: string, location: string, model: Model): Promise<void> {
  const part = Buffer.from(model.data.subarray(model.offset))
  if (part.length === 0) return
  const withDigest = int(2) === 0
  const flipAt = int(3) === 0 ? int(part.length) : -1
  if (flipAt >= 0) part[flipAt] = (part[flipAt] as number) ^ 1
  const sent = int(part.length)
  const id = location.split('/').pop() as string
  // The last request's lock is let go first, so that the one held is this one.
  await lockHeld(uploadDir, id, null)
  const { socket } = await rawConnection(Number(new URL(origin).port))
  socket.write([`PATCH ${location} HTTP/1.1`, 'Host: localhost', 'Content-Type: application/partial-upload', `Upload-Offset: ${model.offset}`,
    'Upload-Complete: ?0', `Content-Length: ${part.length}`, ...(withDigest ? [`Content-Digest: ${member('sha-256', part)}`] : []), '', ''].join('\r\n'))
  socket.write(part.subarray(0, sent))
  await lockHeld(uploadDir, id, process.pid)
  // Without a digest of its own, its bytes reach the file as they come: cut once some did.
  if (!withDigest && sent > 0) await grown(join(uploadDir, `${id}.part`), model.offset)
  socket.destroy()
  const method = int(2) === 0 ? 'HEAD' : 'GET'
  const told = Number((await send(origin, method, location, {})).headers['upload-offset'])
  const kept = told - model.offset
  t.ok(kept >= 0 && kept <= sent && (!withDigest || kept === 0),
    `an append cut after ${sent} of ${part.length} bytes${withDigest ? ', with its Content-Digest,' : ''} kept ${kept}, told by ${method}`)
  model.flipped ||= flipAt >= 0 && flipAt < kept
  model.offset = told
}

t.test('property: random appends, offsets, corruptions, interruptions and restarts against a model of the draft', async (t) => {
  const uploadDir = folder(t)
  let app = await buildServer({ uploadDir, logger: false })
  let origin = `http://127.0.0.1:${await listen(app)}`
  t.teardown(async () => await app.close())
  let checks = 0
  for (let run = 0; run < 20; run++) {
    const data = seededBytes(1 + int(96 * 1024), int(2 ** 31))
    const model: Model = { data, offset: 0, flipped: false, state: 'open' }
    const first = data.subarray(0, int(data.length))
    const created = await transfer(origin, null, 0, first, false, { 'repr-digest': member('sha-256', data) })
    t.equal(created.status, 201)
    model.offset = first.length
    const location = created.headers.location as string
    for (let step = 0; step < 12 && model.state === 'open'; step++) {
      const choice = int(7)
      if (choice === 6) {
        await interrupt(t, origin, uploadDir, location, model)
        checks++
        continue
      }
      if (choice === 0) {
        await app.close()
        app = await buildServer({ uploadDir, logger: false })
        origin = `http://127.0.0.1:${await listen(app)}`
        continue
      }
      if (choice === 1) {
        const method = int(2) === 0 ? 'HEAD' : 'GET'
        const head = await send(origin, method, location, {})
        t.equal(Number(head.headers['upload-offset']), model.offset, `${method} gives the model offset`)
        checks++
        continue
      }
      const complete = choice === 5 || random() < 0.15
      const end = complete ? data.length : model.offset + int(data.length - model.offset + 1)
      const offset = choice === 2 ? model.offset + 1 + int(1000) : model.offset
      const part = Buffer.from(data.subarray(offset, end))
      const flip = choice === 3 && part.length > 0
      const at = int(part.length)
      if (flip) part[at] = (part[at] as number) ^ 1
      // A Content-Digest of other bytes than those sent: that append alone fails.
      const wrongContent = choice === 4
      const extra = wrongContent ? { 'content-digest': member('sha-256', Buffer.concat([part, Buffer.from('x')])) } : {}
      const answer = await transfer(origin, location, offset, part, complete, extra)
      checks++
      if (offset !== model.offset) {
        t.equal(answer.status, 409, 'another offset is a conflict')
        t.same(JSON.parse(answer.body), {
          type: `${problemTypes}mismatching-upload-offset`,
          title: 'offset from request does not match offset of resource',
          'expected-offset': model.offset,
          'provided-offset': offset
        })
        t.equal(answer.headers['upload-offset'], String(model.offset))
        continue
      }
      if (wrongContent) {
        t.equal(answer.status, 400, 'the append whose content digest fails is refused')
        t.equal(answer.headers['upload-complete'], '?0', 'and the upload goes on')
        continue
      }
      model.flipped ||= flip
      model.offset = end
      if (!complete) {
        t.equal(answer.status, 204, 'the append is taken')
        continue
      }
      model.state = model.flipped ? 'gone' : 'complete'
      t.equal(answer.status, model.flipped ? 400 : 200, model.flipped ? 'a flipped byte fails the upload' : 'it completes')
      t.equal(answer.headers['upload-complete'], '?1')
    }
    const id = location.split('/').pop() as string
    if (model.state === 'complete') t.ok(readFileSync(join(uploadDir, id)).equals(data), 'the stored upload is the data')
    if (model.state === 'gone') t.notOk(existsSync(join(uploadDir, `${id}.part`)), 'a failed upload is removed')
  }
  t.ok(checks > 30, `${checks} answers checked against the model`)
})

t.test('Want-Repr-Digest at creation is answered with the digest of the upload so far on every append', async (t) => {
  const uploadDir = folder(t)
  const app = await buildServer({ uploadDir, logger: false })
  const origin = `http://127.0.0.1:${await listen(app)}`
  t.teardown(async () => await app.close())
  const data = seededBytes(40_000, 7)
  const created = await transfer(origin, null, 0, data.subarray(0, 10_000), false, { 'want-repr-digest': 'sha-512=5, sha-256=1' })
  t.equal(created.headers['repr-digest'], member('sha-512', data.subarray(0, 10_000)), 'on the creation')
  t.equal(created.headers.vary, 'Want-Repr-Digest')
  const location = created.headers.location as string
  const appended = await transfer(origin, location, 10_000, data.subarray(10_000, 25_000), false)
  t.equal(appended.headers['repr-digest'], member('sha-512', data.subarray(0, 25_000)), 'on an append that does not ask')
  const other = await transfer(origin, location, 25_000, data.subarray(25_000, 30_000), false, { 'want-repr-digest': 'sha-256=1' })
  t.equal(other.status, 204)
  t.notOk(other.headers['repr-digest'], 'an append asking for an algorithm the upload is not hashed with gets none')
  const completed = await transfer(origin, location, 30_000, data.subarray(30_000), true, { 'want-repr-digest': 'sha-512=1' })
  t.equal(completed.status, 200)
  const content = Buffer.from(completed.body)
  t.equal(completed.headers['repr-digest'], member('sha-512', content), 'a response with content of its own has its own')
  t.equal(JSON.parse(completed.body).digests['sha-512'], digestOf('sha-512', data).toString('base64'), 'which gives the upload\'s')
})

t.test('an append at another offset is refused before its content is sent', async (t) => {
  const uploadDir = folder(t)
  const app = await buildServer({ uploadDir, logger: false })
  const port = await listen(app)
  const origin = `http://127.0.0.1:${port}`
  t.teardown(async () => await app.close())
  const created = await transfer(origin, null, 0, Buffer.from('first part'), false)
  const location = created.headers.location as string
  for (const [offset, provided] of [['3', 3], ['10.0', null], ['-10', null], ['3;a', 3], ['', null]] as const) {
    const head = [`PATCH ${location} HTTP/1.1`, 'Host: localhost', 'Content-Type: application/partial-upload',
      'Upload-Complete: ?0', `Upload-Offset: ${offset}`, 'Content-Length: 5', 'Expect: 100-continue']
    // The content is never written: the answer comes to the head alone.
    const answer = await rawRequest(port, head)
    t.equal(answer.status, 409, `Upload-Offset: ${offset}`)
    t.notMatch(answer.body, /100 Continue/)
    t.same(JSON.parse(answer.body), {
      type: `${problemTypes}mismatching-upload-offset`,
      title: 'offset from request does not match offset of resource',
      'expected-offset': 10,
      ...(provided === null ? {} : { 'provided-offset': provided })
    })
    t.equal(answer.headers['upload-offset'], '10')
    t.equal(answer.headers['upload-complete'], '?0')
  }
  const head = await send(origin, 'HEAD', location, {})
  t.equal(head.headers['upload-offset'], '10', 'nothing was appended')
})

t.test('an append whose own Content-Digest fails is not kept, and can be sent again', async (t) => {
  const uploadDir = folder(t)
  const app = await buildServer({ uploadDir, logger: false })
  const origin = `http://127.0.0.1:${await listen(app)}`
  t.teardown(async () => await app.close())
  const data = seededBytes(20_000, 11)
  const created = await transfer(origin, null, 0, data.subarray(0, 5000), false, { 'repr-digest': member('sha-256', data) })
  const location = created.headers.location as string
  const bad = await transfer(origin, location, 5000, data.subarray(5000), true, { 'content-digest': member('sha-256', data) })
  t.equal(bad.status, 400)
  t.equal(bad.headers['upload-complete'], '?0', 'the upload is not over')
  t.equal((await send(origin, 'HEAD', location, {})).headers['upload-offset'], '5000')
  t.equal(readFileSync(join(uploadDir, `${location.split('/').pop() as string}.part`)).length, 5000, 'the file is back at the offset')
  const good = await transfer(origin, location, 5000, data.subarray(5000), true)
  t.equal(good.status, 200)
})
