// Several instances of the example server on one folder (issue 27): an upload's requests are taken
// one at a time across processes, and a newer request takes over from an older one running in the
// other process (draft-ietf-httpbis-resumable-upload-15, "Concurrency"). Two processes serve one
// folder; each append goes to either, and in seeded random rounds an append stalls half-sent on one
// while the client resumes on the other from the offset HEAD gives; and the same append is sent to
// both at once. The oracles: a model of the upload's bytes and offsets, the file left on disk, and
// Node's createHash over the bytes the test sent.
import { createHash } from 'node:crypto'
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { request } from 'undici'
import { fuzzSeed, lockHeld, rawConnection, seededBytes, seededRandom, serverProcess, type ServerProcess, type Tap } from '../helpers.js'

t.comment(`seed ${fuzzSeed} (DIGEST_FUZZ_SEED replays it)`)
const random = seededRandom(fuzzSeed)
const int = (below: number): number => Math.floor(random() * below)
const sha256 = (data: Buffer): string => createHash('sha256').update(data).digest('base64')

type Instance = ServerProcess
const start = async (t: Tap, uploadDir: string): Promise<Instance> => await serverProcess(t, ['examples/resumable-upload-server.js'], { UPLOAD_DIR: uploadDir })

/** Two processes of the example server on one new folder, and a seeded pick of either. */
async function twoProcesses (t: Tap): Promise<{ uploadDir: string, instances: [Instance, Instance], either: () => Instance }> {
  const uploadDir = mkdtempSync(join(tmpdir(), 'resumable-two-'))
  t.teardown(() => rmSync(uploadDir, { recursive: true, force: true }))
  const instances: [Instance, Instance] = [await start(t, uploadDir), await start(t, uploadDir)]
  return { uploadDir, instances, either: () => instances[int(2)] as Instance }
}

async function append (origin: string, location: string, offset: number, part: Buffer, complete: boolean): Promise<{ status: number, body: string }> {
  const response = await request(origin + location, {
    method: 'PATCH',
    headers: { 'content-type': 'application/partial-upload', 'upload-offset': String(offset), 'upload-complete': complete ? '?1' : '?0' },
    body: part
  })
  return { status: response.statusCode, body: await response.body.text() }
}

t.test('two processes on one folder: appends to either, and a newer one taking over a stalled one in the other', async (t) => {
  const { uploadDir, instances, either } = await twoProcesses(t)
  for (let round = 0; round < 4; round++) {
    const data = seededBytes(1 + int(200_000), int(2 ** 31))
    const cuts = [0, ...Array.from({ length: 3 }, () => int(data.length)).sort((a, b) => a - b), data.length]
    const created = await request(`${either().origin}/resumable`, {
      method: 'POST', headers: { 'upload-complete': '?0', 'repr-digest': `sha-256=:${sha256(data)}:` }, body: data.subarray(0, cuts[1])
    })
    t.equal(created.statusCode, 201)
    await created.body.dump()
    const location = created.headers.location as string
    const id = location.split('/').pop() as string
    let offset = cuts[1] as number
    let takeovers = 0
    for (let i = 2; i < cuts.length; i++) {
      const part = data.subarray(offset, cuts[i])
      const complete = i === cuts.length - 1
      const [taker, stalled] = int(2) === 0 ? instances : [instances[1], instances[0]]
      if (part.length > 1 && int(2) === 0) {
        // Half of the append on one process, held there; then the whole append on the other. The
        // lock of the last request is let go first, so that the one held is the half-sent append.
        await lockHeld(uploadDir, id, null)
        // Its end: a refusal, or its connection closed.
        const { socket, answered: ended } = await rawConnection(stalled.port)
        socket.write([`PATCH ${location} HTTP/1.1`, 'Host: localhost', 'Content-Type: application/partial-upload',
          `Upload-Offset: ${offset}`, `Upload-Complete: ${complete ? '?1' : '?0'}`, `Content-Length: ${part.length}`, '', ''].join('\r\n'))
        socket.write(part.subarray(0, part.length >> 1))
        await lockHeld(uploadDir, id, stalled.child.pid as number)
        // The client resumes as the draft says: the offset first, which takes the upload over and
        // keeps what the stalled one wrote, then the rest.
        const head = await request(`${taker.origin}${location}`, { method: 'HEAD' })
        t.match(await ended, /^(409|closed)$/, 'the stalled one was ended')
        socket.destroy()
        const resumed = Number(head.headers['upload-offset'])
        t.ok(resumed >= offset && resumed <= offset + (part.length >> 1), `round ${round}: resumed at ${resumed}, at most the half sent kept`)
        const answer = await append(taker.origin, location, resumed, data.subarray(resumed, cuts[i]), complete)
        t.equal(answer.status, complete ? 200 : 204, `round ${round}: the rest, on the other process, is taken`)
        takeovers++
      } else {
        const answer = await append(taker.origin, location, offset, part, complete)
        t.equal(answer.status, complete ? 200 : 204, `round ${round}: an append on either process`)
      }
      offset = cuts[i] as number
      if (!complete) {
        const head = await request(`${either().origin}${location}`, { method: 'HEAD' })
        t.equal(head.headers['upload-offset'], String(offset), 'both processes tell the offset of the model')
      }
    }
    t.ok(readFileSync(join(uploadDir, id)).equals(data), `round ${round}: the file is the bytes sent, ${takeovers} appends taken over`)
    t.notOk(existsSync(join(uploadDir, `${id}.part`)), 'no part left')
    t.match(JSON.parse(readFileSync(join(uploadDir, `${id}.json`), 'utf8')), { complete: true, offset: data.length, length: data.length },
      'and what both processes tell of it is the whole upload')
  }
})

/**
 * Sends one append to each process at once over raw sockets, their writes interleaved in a seeded
 * order; resolves with what each client saw: a status, or `closed`.
 */
async function race (instances: Instance[], location: string, offset: number, part: Buffer, complete: boolean): Promise<string[]> {
  const head = [`PATCH ${location} HTTP/1.1`, 'Host: localhost', 'Connection: close', 'Content-Type: application/partial-upload',
    `Upload-Offset: ${offset}`, `Upload-Complete: ${complete ? '?1' : '?0'}`, `Content-Length: ${part.length}`, '', ''].join('\r\n')
  const senders = await Promise.all(instances.map(async ({ port }) => {
    const { socket, answered: seen } = await rawConnection(port)
    const cut = int(part.length + 1)
    return { socket, seen, writes: [Buffer.from(head), part.subarray(0, cut), part.subarray(cut)] }
  }))
  while (senders.some(({ writes }) => writes.length > 0)) {
    const sender = senders.filter(({ writes }) => writes.length > 0)[int(2)] ?? senders.find(({ writes }) => writes.length > 0)
    if (sender === undefined) break
    const data = sender.writes.shift() as Buffer
    if (!sender.socket.destroyed) sender.socket.write(data)
    // Each write reaches the loop before the next, so that the two requests interleave.
    await new Promise(setImmediate)
  }
  const seen = await Promise.all(senders.map(({ seen }) => seen))
  for (const { socket } of senders) socket.destroy()
  return seen
}

t.test('two processes racing on one upload: the same append sent to both at once, in seeded interleavings', async (t) => {
  const { uploadDir, instances, either } = await twoProcesses(t)
  for (let round = 0; round < 6; round++) {
    const data = seededBytes(1 + int(100_000), int(2 ** 31))
    const first = int(data.length)
    const created = await request(`${either().origin}/resumable`, {
      method: 'POST', headers: { 'upload-complete': '?0', 'repr-digest': `sha-256=:${sha256(data)}:` }, body: data.subarray(0, first)
    })
    t.equal(created.statusCode, 201)
    await created.body.dump()
    const location = created.headers.location as string
    const id = location.split('/').pop() as string
    let offset = first
    let completed = false
    for (let races = 0; !completed && races < 20; races++) {
      // An upload kept whole by a request taken over is completed by an append without content;
      // after ten races the rest is sent, so that seeded ends that keep falling short still finish.
      const end = offset === data.length ? offset : races >= 10 ? data.length : offset + 1 + int(data.length - offset)
      const complete = end === data.length
      const seen = await race(instances, location, offset, data.subarray(offset, end), complete)
      const taken = seen.filter((status) => /^2/.test(status)).length
      t.ok(taken <= 1 && seen.every((status) => /^(20[04]|409|400|closed)$/.test(status)), `round ${round}: ${seen.join(' and ')}: one at most taken, no other outcome`)
      // The model: the append was taken once or not at all, and the folder holds the bytes sent up to the offset told.
      const head = await request(`${either().origin}${location}`, { method: 'HEAD' })
      const told = Number(head.headers['upload-offset'])
      completed = head.headers['upload-complete'] === '?1'
      // A request taken over keeps what it wrote.
      t.ok(told === end || (told >= offset && told < end && taken === 0), `offset ${offset} to ${end}: the offset told is ${told}`)
      t.ok(!completed || told === data.length, 'complete only once whole')
      const stored = readFileSync(join(uploadDir, completed ? id : `${id}.part`))
      t.ok(stored.equals(data.subarray(0, told)), 'the folder holds the bytes sent up to it')
      offset = told
    }
    t.equal(offset, data.length, `round ${round}: the upload completed`)
    t.match(JSON.parse(readFileSync(join(uploadDir, `${id}.json`), 'utf8')), { complete: true, offset: data.length, digests: { 'sha-256': sha256(data) } },
      'its running digest is the digest of the bytes sent')
  }
})
