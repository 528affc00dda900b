/** Committing only verified content: the verdict as a promise, and files moved into place only once it is in. */
import { rename } from 'node:fs/promises'
import { resolve } from 'node:path'
import type { Readable } from 'node:stream'
import type { FastifyRequest } from 'fastify'
import type { CommittedFiles, SavedFile, VerifiedDigest, VerifiedFiles as VerifiedFilesApi } from '../types.js'
import { invalidOption, unverifiedRoute } from '../errors.js'
import type { Algorithm } from '../fields/algorithms.js'
import type { PendingContent } from '../request/pending-content.js'
import { isCutShort } from '../request/source.js'
import { kPendingContent, kRouteSettings, kVerifiedFiles } from '../symbols.js'
import { uncommittedFileKept } from '../warnings.js'
import { removeSaved, saveFile, type Saving } from './saved-file.js'

type VerdictRequest = FastifyRequest & {
  [kPendingContent]?: PendingContent | null
  [kVerifiedFiles]?: VerifiedFiles | null | false
}

/**
 * The request's verdict: what was verified, or null when the content had no integrity field; the
 * DigestProblem (or the abort) when it failed. It waits for the content's readers to read it to
 * its end, and reads what nobody reads; a reader that stands still for the route's stallTimeout
 * is cut off with an error (@fastify/multipart's file() with a later file nobody reads).
 */
export async function digestVerdict (request: FastifyRequest): Promise<VerifiedDigest | null> {
  if ((request.routeOptions.config as { [kRouteSettings]?: unknown })[kRouteSettings] === null) {
    throw unverifiedRoute('digestVerdict()')
  }
  const pending = (request as VerdictRequest)[kPendingContent]
  const failure = pending == null
    ? (request.raw as Readable).errored
    : pending.settled
      ? pending.failure
      : await new Promise<Error | null>((resolve) => pending.whenSettled(resolve, 'stall'))
  if (failure != null) throw failure
  return request.digest
}

/** Why a request's content failed: the DigestProblem, or the abort, rather than what it caused. */
function failureOf (request: FastifyRequest, error: unknown): unknown {
  const pending = (request as VerdictRequest)[kPendingContent]
  // Content that verified may have been closed for readers the plugin let go: not a failure.
  if (pending?.settled === true) return pending.failure ?? error
  return (request.raw as Readable).errored ?? error
}

/**
 * A client that leaves before its content ended leaves nothing behind. (A request stream also
 * closes after its end, when the handler may still commit; an HTTP/2 request cut short says it is
 * complete, and aborted.)
 */
function discardWhenClientLeaves (request: FastifyRequest, files: VerifiedFiles): void {
  const raw = request.raw
  raw.once('close', () => {
    // Content that verified was complete, though the plugin may have closed its stream since.
    const pending = (request as VerdictRequest)[kPendingContent]
    const verified = pending?.settled === true && pending.failure === null
    if (isCutShort(raw) || (!verified && !raw.complete)) files.discard().catch((error) => request.log.error(uncommittedFileKept(error)))
  })
}

/** Two files for one destination would both be reported committed, and only the last kept. */
function refuseTaken (pending: readonly Saving[], destination: string): void {
  if (pending.some((saving) => resolve(saving.destination) === resolve(destination))) {
    throw invalidOption('verifiedFiles().save()', `${destination} has a file saved to it already`)
  }
}

/** Files written beside their destinations, moved into place once the whole request verified. */
export class VerifiedFiles implements VerifiedFilesApi {
  readonly #request: FastifyRequest
  readonly #algorithm: Algorithm
  readonly #pending: Saving[] = []
  // Each save still writing, resolving with why it failed (never rejecting: nobody may await it).
  readonly #writing: Array<Promise<unknown>> = []
  // commit() was called: no save may start after it, nor a second commit.
  #committing = false
  #settled = false
  #removed: Promise<void> = Promise.resolve()

  /** `algorithm` digests each file; `answered`: the reply went before the files were asked for, so none are taken. */
  constructor (request: FastifyRequest, algorithm: Algorithm, answered: boolean) {
    this.#request = request
    this.#algorithm = algorithm
    this.#settled = answered
    if (!answered) discardWhenClientLeaves(request, this)
  }

  /**
   * Writes `content` to a temporary file beside `destination`, resolving once it is written with
   * its size and digest; a failure removes it.
   */
  async save (content: Readable, destination: string): Promise<SavedFile> {
    this.#refuseSettled(true)
    refuseTaken(this.#pending, destination)
    const saving = saveFile(content, destination, this.#algorithm)
    this.#pending.push(saving)
    const { written } = saving
    this.#writing.push(written.then(() => null, (error: unknown) => error))
    // A save waits for the content like the plugin's own waits, within the same bound.
    const pending = (this.#request as VerdictRequest)[kPendingContent]
    if (pending?.settled === false) pending.whenSettled(null, 'stall')
    try {
      return await written
    } catch (error) {
      await this.discard()
      // Files removed because the content failed fail with its problem, which the plugin answers.
      throw failureOf(this.#request, error)
    }
  }

  /**
   * Waits for the verdict, then moves every saved file into place and resolves with what was
   * verified; on a failed or unverifiable request, removes them all and rejects with its problem.
   */
  async commit (): Promise<CommittedFiles> {
    this.#refuseSettled(true)
    this.#committing = true
    let verdict: VerifiedDigest | null
    try {
      // Every save still writing is waited for, while the verdict bounds the wait: what is
      // committed is all that was verified.
      const [written, verified] = await Promise.all([Promise.all(this.#writing), digestVerdict(this.#request)])
      const failed = written.find((error) => error !== null)
      if (failed !== undefined) throw failureOf(this.#request, failed)
      verdict = verified
    } catch (error) {
      await this.discard()
      throw error
    }
    // The reply may have gone meanwhile, removing the files: nothing is committed then.
    this.#refuseSettled()
    this.#settled = true
    const files: SavedFile[] = []
    try {
      // One by one, each left to discard() until it is in place, so that a failed rename removes it.
      for (let file = this.#pending[0]; file !== undefined; file = this.#pending[0]) {
        await rename(file.partial, file.destination)
        files.push(await file.written)
        this.#pending.shift()
      }
    } finally {
      await this.discard()
    }
    return { digest: verdict, files }
  }

  /** Refuses a save or commit once the files were committed or discarded, or, with `committing`, once commit() began. */
  #refuseSettled (committing = false): void {
    if (this.#settled || (committing && this.#committing)) {
      throw failureOf(this.#request, new Error('fastify-digest-fields: verifiedFiles: already committed or discarded'))
    }
  }

  /**
   * Removes every file saved and not committed. The plugin calls it before any answer goes (and when
   * the client leaves), so that a request that ends any other way (an error, an abort, a handler
   * that never commits) leaves nothing behind.
   */
  async discard (): Promise<void> {
    this.#settled = true
    // Every caller waits for every removal so far: the plugin's hooks and a failed save() alike.
    const removals = this.#pending.splice(0).map(removeSaved)
    // An earlier removal that failed was reported to the caller that waited for it.
    this.#removed = Promise.all([this.#removed.catch(() => {}), ...removals]).then(() => {})
    await this.#removed
  }
}

/**
 * Removes the files saved with request.verifiedFiles() and not committed, before the answer goes: a
 * client that has it finds none of them; null when there are none. An onResponse hook would do it
 * later, and would make Fastify follow every response's end (without a logger it follows none).
 */
export function discardUncommitted (request: FastifyRequest): Promise<void> | null {
  const files = (request as VerdictRequest)[kVerifiedFiles]
  if (files == null || files === false) {
    (request as VerdictRequest)[kVerifiedFiles] = false
    return null
  }
  // A file that cannot be removed is not at its destination: the answer goes, and the log says so.
  return files.discard().catch((error: unknown) => { request.log.error(uncommittedFileKept(error)) })
}
