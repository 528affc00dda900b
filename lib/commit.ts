/** Committing only verified content: the verdict as a promise, and files moved into place only once it is in. */
import { randomUUID } from 'node:crypto'
import { createWriteStream } from 'node:fs'
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

/** Files written beside their destinations, moved into place once the whole request verified. */
export class VerifiedFiles implements VerifiedFilesApi {
  readonly #request: FastifyRequest
  readonly #pending: Array<{ partial: string, destination: string }> = []
  #settled = false

  constructor (request: FastifyRequest) {
    this.#request = request
  }

  /**
   * Writes `content` to a temporary file beside `destination` (same folder, so the move is a
   * rename), resolving once it is written; a failure removes it.
   */
  async save (content: Readable, destination: string): Promise<void> {
    if (this.#settled) throw new Error('fastify-digest-fields: verifiedFiles: already committed or discarded')
    const partial = join(dirname(destination), `.${basename(destination)}.${randomUUID()}.partial`)
    this.#pending.push({ partial, destination })
    try {
      await pipeline(content, createWriteStream(partial, { flags: 'wx' }))
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
    await Promise.all(this.#pending.splice(0).map(({ partial }) => rm(partial, { force: true })))
  }
}
