// Resumable uploads (draft-ietf-httpbis-resumable-upload-15, interop version 9) over the
// filesystem, with the digest of the whole upload verified across appends, restarts and servers
// (RFC 9530 Repr-Digest): `node examples/resumable-upload-server.js`.
//   OPTIONS     /resumable       Upload-Limit
//   POST        /resumable       creates an upload (Upload-Complete: ?0 or ?1), with its first content;
//                                a 104 announces it first where Node can send one (24.21, 26.10)
//   HEAD or GET /resumable/:id   its offset, and its length once known
//   PATCH       /resumable/:id   appends (Content-Type: application/partial-upload, Upload-Offset)
//   DELETE      /resumable/:id   cancels it
// Each upload is two files in UPLOAD_DIR: `<id>.part`, the bytes received, and `<id>.json`, its
// offset, length and the running digest's state; a completed upload is moved to `<id>`. Its lock
// is in UPLOAD_DIR/.locks, so that several processes can serve one folder.
import { randomUUID } from 'node:crypto'
import { ServerResponse } from 'node:http'
import { createWriteStream, realpathSync } from 'node:fs'
import { mkdir, mkdtemp, readFile, rename, rm, truncate, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { pipeline } from 'node:stream/promises'
import { fileURLToPath } from 'node:url'
import Fastify from 'fastify'
import fastifyDigestFields from 'fastify-digest-fields'
import { FolderLocks } from './upload-folder-locks.js'

/** The draft's interop version this server speaks (its Appendix B): a 104 goes only to its clients. */
export const interopVersion = '9'
// No limits of its own: the draft's way to say so (section 4.1.4).
const uploadLimit = 'min-size=0'
/** Whether this Node can send a 104 (ServerResponse.writeInformation, Node 24.21 and 26.10). */
export const canSend104 = typeof ServerResponse.prototype.writeInformation === 'function'

// Upload ids are 32 hex digits: read from the URL before validation too, never a path of their own.
const idPattern = /^[0-9a-f]{32}$/
const uploadId = { type: 'object', properties: { id: { type: 'string', pattern: idPattern.source } }, required: ['id'] }

const takenOver = () => Object.assign(new Error('a newer request took the upload over'), { statusCode: 409 })

/**
 * One request at a time on an upload (the draft's "Concurrency"). A new request ends the newest one
 * before it: its connection is closed and its signal aborted, which ends its pipeline even where
 * Node would leave a pipeline from a destroyed request unsettled. The new one then waits until every
 * request before it is done: until its handler has put the upload's files back in order, or, for
 * one that never reached its handler, until its response went or its client left. With a folder,
 * the same across the processes that serve it (upload-folder-locks.js).
 */
export class UploadLocks {
  // The newest request of each upload, until every request of the upload is done.
  #newest = new Map()
  #folder

  constructor (folder = null) {
    this.#folder = folder === null ? null : new FolderLocks(folder)
  }

  close () {
    this.#folder?.close()
  }

  async acquire (id, request, reply) {
    const previous = this.#newest.get(id)
    const lock = { request, inHandler: false, controller: new AbortController() }
    let ended = false
    let letGo = null
    const own = new Promise((resolve) => {
      // The folder's lock is let go first, once it was taken.
      lock.release = () => {
        if (ended) return
        ended = true
        // A request still waiting for the folder's lock stops waiting.
        lock.controller.abort()
        Promise.resolve(letGo?.()).then(resolve, resolve)
      }
    })
    lock.released = previous === undefined ? own : Promise.all([own, previous.released])
    this.#newest.set(id, lock)
    lock.released.then(() => { if (this.#newest.get(id) === lock) this.#newest.delete(id) })
    request.uploadLock = lock
    reply.raw.once('close', () => { if (!lock.inHandler && !reply.raw.writableFinished) lock.release() })
    // An answered request is let be: closing its connection would cut the client's next request on it.
    lock.end = () => {
      lock.controller.abort()
      if (!reply.raw.writableEnded) request.raw.destroy()
    }
    if (previous !== undefined) {
      previous.end()
      await previous.released
    }
    if (this.#folder === null) return
    const release = await this.#folder.hold(id, lock.end, lock.controller.signal)
    // A request that ended while it waited lets the folder's lock go at once, if it got it.
    if (ended) await release?.()
    else letGo = release
  }

  /** Runs a handler's work on the upload, unless a newer request took it over meanwhile. */
  async within (request, work) {
    const lock = request.uploadLock
    if (lock.controller.signal.aborted) {
      lock.release()
      throw takenOver()
    }
    lock.inHandler = true
    try {
      return await work(lock.controller.signal)
    } finally {
      lock.release()
    }
  }
}

/** Whether a 104 may go to this request's client: this Node can send one, and it speaks this interop version. */
function speaks104 (request) {
  return canSend104 && String(request.headers['upload-draft-interop-version']).trim() === interopVersion
}

export async function buildServer ({ uploadDir, logger = true, progressEveryMs = 1000 } = {}) {
  const app = Fastify({ logger })
  const locks = new UploadLocks(uploadDir)
  app.addHook('onClose', async () => { locks.close() })
  app.decorateRequest('uploadLock', null)
  // Before the plugin's hook, which loads the upload's state: the upload is held first.
  app.addHook('onRequest', async (request, reply) => {
    if (idPattern.test(request.params.id)) await locks.acquire(request.params.id, request, reply)
  })
  await app.register(fastifyDigestFields)
  // Content that arrived with the head is judged before any handler runs: an append that completed
  // the upload and failed its digest is refused there, and the upload removed here before the
  // answer goes.
  app.addHook('onSend', async (request, _reply, payload) => {
    const lock = request.uploadLock
    if (lock !== null && !lock.inHandler && request.resumableUpload?.failed === true) await cancel(request.params.id)
    return payload
  })
  app.addHook('onResponse', async (request) => {
    if (request.uploadLock?.inHandler === false) request.uploadLock.release()
  })
  // Nothing parses the content: the handlers stream request.raw to the upload's file.
  app.removeAllContentTypeParsers()
  app.addContentTypeParser('*', (_request, _payload, done) => done(null))

  const paths = (id) => ({ part: join(uploadDir, `${id}.part`), meta: join(uploadDir, `${id}.json`), done: join(uploadDir, id) })

  async function readMeta (id) {
    try {
      return JSON.parse(await readFile(paths(id).meta, 'utf8'))
    } catch {
      return null
    }
  }

  // Written beside and renamed, so that a crash leaves the old metadata or the new, never half.
  async function writeMeta (id, meta) {
    const path = paths(id).meta
    const temporary = `${path}.${randomUUID()}.tmp`
    await writeFile(temporary, JSON.stringify(meta), { flush: true })
    await rename(temporary, path)
  }

  async function cancel (id) {
    const { part, meta } = paths(id)
    await Promise.all([rm(part, { force: true }), rm(meta, { force: true })])
  }

  /**
   * Appends the request's content at the offset agreed with the plugin. What is written is kept
   * when the request fails (a client that left, a newer request), as far as the plugin can give the
   * state of exactly those bytes; a creation no client knows of, or an upload whose whole digest
   * failed, is removed. A client of this interop version hears the offset kept so far in 104s.
   */
  async function append (id, request, reply, meta, signal) {
    const upload = request.resumableUpload
    const { part } = paths(id)
    // Bytes past the offset are what a server stopped mid-append wrote and never stored: not the upload's.
    if (!upload.creation) await truncate(part, upload.offset)
    // Node 24 and 26 never settle a pipeline from a request destroyed before it starts (a newer
    // request took the upload over, or the client left), even with an aborted signal: nothing is
    // awaited between these checks and the pipeline.
    if (signal.aborted) throw takenOver()
    if (request.raw.destroyed) throw Object.assign(new Error('aborted'), { code: 'ECONNRESET' })
    const writer = createWriteStream(part, { flags: upload.creation ? 'w' : 'r+', start: upload.offset })
    const progress = speaks104(request) && (!upload.creation || meta.announced) ? reportProgress(id, request, reply, meta, writer) : null
    try {
      await pipeline(request.raw, writer, { signal })
    } catch (error) {
      // A file still being opened when the content failed would be created after it was removed.
      if (!writer.closed) await new Promise((resolve) => writer.once('close', resolve))
      const reported = await progress?.stop()
      if (upload.failed || (upload.creation && !meta.announced)) {
        await cancel(id)
      } else {
        // The bytes written, if the plugin gives their state; else those of the last 104; else none.
        const state = upload.stateAt(upload.offset + writer.bytesWritten)
        const kept = state !== null ? { offset: upload.offset + writer.bytesWritten, state } : reported ?? { offset: upload.offset, state: upload.state({ contentKept: false }) }
        await truncate(part, kept.offset)
        // The length the request made known is recorded however it ends (section 4.1.3).
        await writeMeta(id, { ...meta, ...kept, length: upload.length })
      }
      throw signal.aborted ? takenOver() : error
    }
    await progress?.stop()
    const updated = { ...meta, offset: upload.offset + writer.bytesWritten, length: upload.length, state: upload.state() }
    if (upload.complete) {
      await rename(part, paths(id).done)
      updated.complete = true
      updated.digests = Object.fromEntries(Object.entries(upload.digests()).map(([key, value]) => [key, value.toString('base64')]))
    }
    await writeMeta(id, updated)
    return updated
  }

  /**
   * Every `progressEveryMs`, stores the offset written so far with its state, then tells it in a 104
   * (sections 4.2.2 and 4.4.2): an offset told is never taken back, so it is stored first. Resolves
   * `stop()` with the last one stored, once none is being stored.
   */
  function reportProgress (id, request, reply, meta, writer) {
    const upload = request.resumableUpload
    let reported = null
    let storing = Promise.resolve()
    const timer = setInterval(() => {
      storing = storing.then(async () => {
        const offset = upload.offset + writer.bytesWritten
        const state = upload.stateAt(offset)
        if (state === null || offset === (reported?.offset ?? upload.offset) || reply.raw.headersSent) return
        await writeMeta(id, { ...meta, offset, state, length: upload.length })
        reported = { offset, state }
        reply.raw.writeInformation(104, { 'upload-offset': String(offset), 'upload-draft-interop-version': interopVersion })
      })
    }, progressEveryMs)
    return {
      async stop () {
        clearInterval(timer)
        await storing
        return reported
      }
    }
  }

  // Upload-Complete: ?1 is the answer of the resource the upload was for: here, what was stored.
  function answer (reply, id, meta, status) {
    reply.header('upload-complete', meta.complete ? '?1' : '?0')
    if (meta.complete) return reply.code(200).send({ id, size: meta.offset, digests: meta.digests })
    return reply.code(status).headers(offsetFields(meta)).send()
  }

  // What an offset retrieval and an incomplete upload's answers tell (draft sections 4.2.2, 4.3.2).
  function offsetFields (meta) {
    return {
      'upload-offset': String(meta.offset),
      'upload-complete': meta.complete ? '?1' : '?0',
      ...(meta.length == null ? {} : { 'upload-length': String(meta.length) }),
      'upload-limit': uploadLimit
    }
  }

  // POST /resumable creates uploads; each upload resource takes appends, whose running digest the
  // plugin continues from the state stored with the upload.
  const creation = { digest: { resumable: { creation: true } } }
  const appends = {
    digest: {
      resumable: {
        async loadState (request) {
          const meta = idPattern.test(request.params.id) ? await readMeta(request.params.id) : null
          return meta === null || meta.complete ? null : meta.state
        }
      }
    }
  }

  app.post('/resumable', { config: creation }, async (request, reply) => {
    const upload = request.resumableUpload
    if (upload === null) {
      return reply.code(400).type('application/problem+json')
        .send({ type: 'about:blank', title: 'Bad Request', detail: 'an upload creation carries Upload-Complete' })
    }
    const id = randomUUID().replaceAll('-', '')
    const location = `/resumable/${id}`
    await locks.acquire(id, request, reply)
    // Named once held: a problem the plugin answered meanwhile (content that failed before any
    // reader came) names no upload.
    reply.header('location', location)
    return locks.within(request, async (signal) => {
      // A client of this interop version is told of the upload in a 104 before its content, so that
      // it can resume an interrupted creation (section 4.2.2): the upload exists from then on, at
      // offset 0. Without a 104 a client learns of it only from this answer, so a creation that
      // fails leaves nothing.
      const announced = speaks104(request)
      const meta = { offset: 0, complete: false, length: upload.length, state: upload.state(), announced }
      if (announced) {
        await writeFile(paths(id).part, '')
        await writeMeta(id, meta)
        reply.raw.writeInformation(104, { location, 'upload-limit': uploadLimit, 'upload-draft-interop-version': interopVersion })
      }
      try {
        return answer(reply, id, await append(id, request, reply, meta, signal), 201)
      } catch (error) {
        if (!announced) reply.removeHeader('location')
        throw error
      }
    })
  })

  // Upload-Limit before any upload (section 4.1.4); OPTIONS on an upload resource says the same.
  app.options('/resumable', (_request, reply) => reply.code(204).header('upload-limit', uploadLimit).send())
  app.options('/resumable/:id', { schema: { params: uploadId } }, (_request, reply) =>
    reply.code(204).header('upload-limit', uploadLimit).send())

  // Offset retrieval: HEAD, or GET, whose content the draft leaves undefined (section 4.3).
  const retrieveOffset = (request, reply) => locks.within(request, async () => {
    const meta = await readMeta(request.params.id)
    if (meta === null) return reply.code(404).send()
    return reply.code(204).headers({ ...offsetFields(meta), 'cache-control': 'no-store' }).send()
  })
  app.head('/resumable/:id', { schema: { params: uploadId } }, retrieveOffset)
  app.get('/resumable/:id', { schema: { params: uploadId } }, retrieveOffset)

  app.patch('/resumable/:id', { schema: { params: uploadId }, config: appends }, (request, reply) => locks.within(request, async (signal) => {
    const { id } = request.params
    const meta = await readMeta(id)
    if (meta === null) return reply.code(404).send({ error: 'Not Found', message: 'no such upload' })
    if (meta.complete || request.resumableUpload === null) {
      return reply.code(400).header('upload-complete', '?1').type('application/problem+json')
        .send({ type: 'about:blank', title: 'Bad Request', detail: 'the upload is complete' })
    }
    // The plugin agreed on the offset with the stored state before the content was sent.
    return answer(reply, id, await append(id, request, reply, meta, signal), 204)
  }))

  app.delete('/resumable/:id', { schema: { params: uploadId } }, (request, reply) => locks.within(request, async () => {
    const meta = await readMeta(request.params.id)
    if (meta === null || meta.complete) return reply.code(404).send()
    await cancel(request.params.id)
    return reply.code(204).send()
  }))

  return app
}

// Run directly, not imported: PORT and UPLOAD_DIR say where.
if (process.argv[1] !== undefined && realpathSync(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const uploadDir = process.env.UPLOAD_DIR ?? await mkdtemp(join(tmpdir(), 'digest-resumable-'))
  await mkdir(uploadDir, { recursive: true })
  const app = await buildServer({ uploadDir })
  await app.listen({ host: '127.0.0.1', port: Number(process.env.PORT ?? 3000) })
  app.log.info(`uploads are kept in ${uploadDir}`)
  if (!canSend104) app.log.info(`Node ${process.version} cannot send a 104 (Upload Resumption Supported): no ServerResponse.writeInformation() before Node 24.21`)
}
