import { once } from 'node:events'
import { mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, unlinkSync, watch, writeFileSync } from 'node:fs'
import { connect as h2connect } from 'node:http2'
import { request as httpRequest } from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Readable } from 'node:stream'
import Fastify, { type FastifyInstance } from 'fastify'
import t from 'tap'
import fastifyDigestFields from '../../lib/index.js'
import { listen, member, watchProcess, type Tap } from '../helpers.js'

// Issue 20 moved the removal of files saved and not committed from an onResponse hook to the
// onSend hook, before the answer goes. An attack on that change, given only the README and docs,
// found what these tests pin: a save started after the reply, an HTTP/2 client that leaves, a
// commit after the reply, and a removal that fails.

/** The plugin, logging errors to `logged`, and a folder for the files. */
async function setup (t: Tap, http2 = false): Promise<{ app: FastifyInstance, folder: string, logged: string[] }> {
  const folder = mkdtempSync(join(tmpdir(), 'issue-20-'))
  t.teardown(() => rmSync(folder, { recursive: true, force: true }))
  const logged: string[] = []
  const stream = { write: (line: string) => { logged.push(line) } }
  const app = Fastify({ http2, logger: { level: 'error', stream } } as object) as unknown as FastifyInstance
  await app.register(fastifyDigestFields)
  app.addContentTypeParser('application/octet-stream', (_request, _payload, done) => done(null))
  t.teardown(() => app.close())
  return { app, folder, logged }
}

/** Resolves once the folder is empty, as fs.watch reports its entries going. */
async function emptied (folder: string): Promise<void> {
  const watcher = watch(folder)
  try {
    while (readdirSync(folder).length > 0) await once(watcher, 'change')
  } finally {
    watcher.close()
  }
}

/** Puts a folder with a file in it where a saved file's temporary copy is: removing it then fails. */
function blockRemoval (folder: string): void {
  const partial = join(folder, readdirSync(folder).find((name) => name.endsWith('.partial') && statSync(join(folder, name)).isFile()) as string)
  unlinkSync(partial)
  mkdirSync(partial)
  writeFileSync(join(partial, 'inside'), 'a folder rm() without recursive cannot remove')
}

async function put (port: number, path: string, body: string, headers: Record<string, string> = {}): Promise<{ status: number, body: string }> {
  const req = httpRequest({ port, host: '127.0.0.1', path, method: 'PUT', headers: { 'content-type': 'application/octet-stream', ...headers } })
  req.end(body)
  const [res] = await once(req, 'response')
  let text = ''
  for await (const chunk of res) text += String(chunk)
  return { status: res.statusCode, body: text }
}

t.test('a save started after the reply went is refused, and leaves no file', async (t) => {
  const { app, folder } = await setup(t)
  let saved: Promise<string> = Promise.resolve('never ran')
  app.put('/late/:name', async (request, reply) => {
    await reply.code(202).send({ accepted: true })
    saved = request.verifiedFiles().save(request.raw, join(folder, (request.params as { name: string }).name))
      .then(() => 'saved', (error: Error) => error.message)
    return reply
  })
  const port = await listen(app)
  const response = await put(port, '/late/file.bin', 'content')
  t.equal(response.status, 202)
  t.match(await saved, /already committed or discarded/)
  t.same(readdirSync(folder), [])
})

t.test('a commit after the reply went moves nothing, and rejects rather than resolving', async (t) => {
  const { app, folder } = await setup(t)
  let committed: Promise<string> = Promise.resolve('never ran')
  app.put('/early/:name', async (request, reply) => {
    const files = request.verifiedFiles()
    await files.save(request.raw, join(folder, (request.params as { name: string }).name))
    await reply.send({ answered: true })
    committed = files.commit().then(() => 'committed', (error: Error) => error.message)
    return reply
  })
  const port = await listen(app)
  const response = await put(port, '/early/file.bin', 'content', { 'content-digest': member('sha-256', 'content') })
  t.equal(response.status, 200)
  t.match(await committed, /already committed or discarded/)
  t.same(readdirSync(folder), [], 'neither the file nor its temporary copy')
})

t.test('HTTP/2: a client that leaves mid-upload leaves no file while the handler is still busy', async (t) => {
  const { app, folder } = await setup(t, true)
  let markSaved = (): void => {}
  const saved = new Promise<void>((resolve) => { markSaved = resolve })
  let release = (): void => {}
  const busy = new Promise<void>((resolve) => { release = resolve })
  t.teardown(() => release())
  app.put('/first/:name', async (request) => {
    // Keeps the first chunk (a header it wants), then waits on something else.
    const [first] = await once(request.raw, 'data') as [Buffer]
    request.raw.pause()
    await request.verifiedFiles().save(Readable.from([first]), join(folder, (request.params as { name: string }).name))
    markSaved()
    await busy
    return { done: true }
  })
  const port = await listen(app)
  const session = h2connect(`http://127.0.0.1:${port}`)
  session.on('error', () => {})
  t.teardown(() => session.destroy())
  const stream = session.request({ ':method': 'PUT', ':path': '/first/kept.bin', 'content-type': 'application/octet-stream', 'content-length': '100000' })
  stream.on('error', () => {})
  stream.write(Buffer.alloc(5000, 'a'))
  await saved
  t.equal(readdirSync(folder).length, 1, 'the temporary file is there while the client sends')
  const removed = emptied(folder)
  stream.close(0x8) // RST_STREAM(CANCEL)
  await removed
  t.same(readdirSync(folder), [])
})

t.test('a file that cannot be removed is logged, and neither fails the answer nor takes the process down', async (t) => {
  const escaped = watchProcess(t)
  const { app, folder, logged } = await setup(t)
  app.put('/forgetful/:name', async (request) => {
    await request.verifiedFiles().save(request.raw, join(folder, (request.params as { name: string }).name))
    blockRemoval(folder)
    return { committed: false }
  })
  let markBlocked = (): void => {}
  const blocked = new Promise<void>((resolve) => { markBlocked = resolve })
  let markLogged = (): void => {}
  const secondLog = new Promise<void>((resolve) => { markLogged = resolve })
  app.put('/left/:name', async (request) => {
    const [first] = await once(request.raw, 'data') as [Buffer]
    request.raw.pause()
    await request.verifiedFiles().save(Readable.from([first]), join(folder, (request.params as { name: string }).name))
    blockRemoval(folder)
    markBlocked()
    await new Promise((resolve) => request.raw.once('close', resolve))
    return { done: true }
  })
  const port = await listen(app)
  const response = await put(port, '/forgetful/kept.bin', 'content')
  t.equal(response.status, 200, 'the answer goes as the handler gave it')
  t.same(JSON.parse(response.body), { committed: false })
  t.equal(logged.filter((line) => line.includes('could not be removed')).length, 1)
  // A client that leaves: the removal fails in a listener, where a rejection nobody handles would
  // take the process down.
  const log = logged.push.bind(logged)
  logged.push = (...lines: string[]) => { const length = log(...lines); if (lines.some((line) => line.includes('could not be removed'))) markLogged(); return length }
  const req = httpRequest({ port, host: '127.0.0.1', path: '/left/kept.bin', method: 'PUT', headers: { 'content-type': 'application/octet-stream', 'content-length': '100000' } })
  req.on('error', () => {})
  req.write(Buffer.alloc(5000, 'a'))
  await blocked
  req.destroy()
  await secondLog
  await new Promise((resolve) => setImmediate(resolve))
  t.same(escaped, [], 'no unhandled rejection')
  t.equal(logged.filter((line) => line.includes('could not be removed')).length, 2, 'each failure logged once')
})
