/**
 * A request without digest fields to check can still carry some in its trailer section (RFC 9530
 * sections 2 and 3): content that can have one (chunked HTTP/1.1, HTTP/2) is watched for its end,
 * at no cost per chunk beyond a call, and refused there when the trailer section has an integrity
 * field, since nothing announced it and the content was not hashed. Until then, like content being
 * verified, it holds back a success reply.
 */
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Readable } from 'node:stream'
import { refusals } from '../findings.js'
import type { Settings } from '../options/settings.js'
import { answerUnheard } from '../problems/answer.js'
import { problemFor } from '../problems/problems.js'
import { kTrailerWatch } from '../symbols.js'
import { declaredLength } from './framing.js'
import { PendingContent } from './pending-content.js'
import { hasIntegrityTrailer, type Source } from './source.js'

/** The settings of a request's route, or null when it has config.digest: false. */
export type SettingsOf = (request: FastifyRequest) => Settings | null

type WatchedSource = Readable & {
  [kTrailerWatch]?: TrailerWatch | undefined
  trailers?: Record<string, string | undefined>
}

// Only the end is looked at: chunks pass straight on, noted for a wait that may watch them.
function pushWatchingTrailers (this: WatchedSource, chunk: Buffer | null): boolean {
  const watch = this[kTrailerWatch] as TrailerWatch
  if (chunk === null) return watch.end(this)
  watch.arrived()
  return Object.getPrototypeOf(this).push.call(this, chunk)
}

export class TrailerWatch extends PendingContent {
  constructor (readonly request: FastifyRequest, readonly reply: FastifyReply, readonly settingsOf: SettingsOf) {
    super(request.raw as unknown as Source)
  }

  get covered (): boolean {
    return this.settingsOf(this.request) !== null
  }

  /** Only asked on a route the plugin covers: a route with config.digest: false is never waited for. */
  protected stallTimeout (): number {
    return (this.settingsOf(this.request) as Settings).stallTimeout
  }

  /** Gives the request back, for a later registration's hook to judge with its own settings. */
  detach (): void {
    const source = this.request.raw as WatchedSource
    Reflect.deleteProperty(source, 'push')
    source[kTrailerWatch] = undefined
  }

  end (source: WatchedSource): boolean {
    this.detach()
    return this.judgeEnd(source, source.push)
  }

  /** Concludes on the trailer section: true when it has no integrity field; `push` ends the stream, unless it ended. */
  judgeEnd (source: WatchedSource, push: ((chunk: Buffer | null) => boolean) | null): boolean {
    const settings = hasIntegrityTrailer(source.trailers) ? this.settingsOf(this.request) : null
    if (settings === null) return push === null || this.concludeVerified([], push)
    const problem = problemFor(settings, [refusals.unannouncedTrailer()])
    this.concludeFailed(problem, (heard) => { if (push !== null) answerUnheard(problem, heard, this.request, this.reply) })
    return false
  }
}

/** Watches the request's end for trailer fields, when its framing lets it have a trailer section. */
export function watchTrailers (request: FastifyRequest, reply: FastifyReply, settingsOf: SettingsOf): TrailerWatch | null {
  const canHaveTrailers = request.raw.httpVersionMajor === 2
    ? declaredLength(request) !== 0
    : request.headers['transfer-encoding'] !== undefined
  if (!canHaveTrailers) return null
  const watch = new TrailerWatch(request, reply, settingsOf)
  const source = request.raw as WatchedSource
  // An end that came before this hook ran (behind an asynchronous hook) was pushed already: it is
  // judged as it is, and a failure reaches the handler's reader or reply, as a later one would.
  if ((source as unknown as Source)._readableState.ended) return watch.judgeEnd(source, null) ? null : watch
  source[kTrailerWatch] = watch
  source.push = pushWatchingTrailers
  return watch
}
