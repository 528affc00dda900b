/** Committing only verified content: the verdict as a promise, and files moved into place only once it is in. */
import { randomUUID } from 'node:crypto'
import { createWriteStream, type WriteStream } from 'node:fs'
import { rename, rm } from 'node:fs/promises'
import { basename, dirname, join } from 'node:path'
import { finished, pipeline } from 'node:stream/promises'
import type { Readable } from 'node:stream'
import type { FastifyRequest } from 'fastify'
import type { VerifiedDigest, VerifiedFiles as VerifiedFilesApi } from './types.js'
import { readToEnd } from './source.js'

/**
 * The request's verdict: its content read to the end (what no reader takes is discarded), then
 * what was verified, or null when the content had no integrity field; the DigestProblem (or the
 * abort) when it failed. The end of request.raw is let through only once the digests matched.
 */
export async function digestVerdict (request: FastifyRequest): Promise<VerifiedDigest | null> {
  const raw = request.raw as Readable
  if (!raw.readableEnded) readToEnd(raw, false)
  await finished(raw, { writable: false })
  return request.digest
}

interface Saved { readonly partial: string, readonly destination: string, readonly writer: WriteStream }

async function removeSaved ({ partial, writer }: Saved): Promise<void> {
  // A file still being opened would be created after it was removed: it is closed first.
  if (!writer.closed) await new Promise<void>((resolve) => writer.once('close', () => resolve()).destroy())
  await rm(partial, { force: true })
}

/** Files written beside their destinations, moved into place once the whole request verified. */
export class VerifiedFiles implements VerifiedFilesApi {
  readonly #request: FastifyRequest
  readonly #pending: Saved[] = []
  #settled = false
  #removed: Promise<void> = Promise.resolve()

  constructor (request: FastifyRequest) {
    this.#request = request
    // A client that leaves before its content ended leaves nothing behind. (A request stream also
    // closes after its end, when the handler may still commit.)
    request.raw.once('close', () => { if (!request.raw.complete) this.discard() })
  }

  /**
   * Writes `content` to a temporary file beside `destination` (same folder, so the move is a
   * rename), resolving once it is written; a failure removes it.
   */
  async save (content: Readable, destination: string): Promise<void> {
    if (this.#settled) throw new Error('fastify-digest-fields: verifiedFiles: already committed or discarded')
    const partial = join(dirname(destination), `.${basename(destination)}.${randomUUID()}.partial`)
    const writer = createWriteStream(partial, { flags: 'wx' })
    this.#pending.push({ partial, destination, writer })
    try {
      await pipeline(content, writer)
    } catch (error) {
      await this.discard()
      throw error
    }
  }

  /**
   * Waits for the verdict, then moves every saved file into place and resolves with what was
   * verified; on a failed or unverifiable request, removes them all and rejects with its problem.
   */
  async commit (): Promise<VerifiedDigest | null> {
    let verdict: VerifiedDigest | null
    try {
      verdict = await digestVerdict(this.#request)
    } catch (error) {
      await this.discard()
      throw error
    }
    this.#settled = true
    try {
      for (let file = this.#pending.shift(); file !== undefined; file = this.#pending.shift()) {
        await rename(file.partial, file.destination)
      }
    } finally {
      await this.discard()
    }
    return verdict
  }

  /**
   * Removes every file saved and not committed. The plugin calls it once the response is sent, so
   * that a request that ends any other way (an error, an abort, a handler that never commits)
   * leaves nothing behind.
   */
  async discard (): Promise<void> {
    this.#settled = true
    // Every caller waits for every removal so far: the plugin's hooks and a failed save() alike.
    const removals = this.#pending.splice(0).map(removeSaved)
    this.#removed = Promise.all([this.#removed, ...removals]).then(() => {})
    await this.#removed
  }
}
