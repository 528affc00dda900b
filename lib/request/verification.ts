/** The verification of one request, set up in onRequest: at the source when it has fields, else a trailer watch. */
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Readable } from 'node:stream'
import { distinct, type Algorithm } from '../fields/algorithms.js'
import { sendProblem } from '../problems/answer.js'
import { announcedFields, judgeFields, type Expectation } from './judge-fields.js'
import { refusals, type Finding } from '../findings.js'
import { closeDelimiter, declaredLength, isPartial, keptTransferCoding } from './framing.js'
import type { Settings } from '../options/settings.js'
import { problemFor, type DigestProblem } from '../problems/problems.js'
import { contentCodings, UnencodedHasher } from '../fields/unencoded.js'
import { closeRequest, failSource, hasIntegrityTrailer, type Source } from './source.js'
import { ContentWait, type Release, type Waiter } from './content-wait.js'
import { kTrailerWatch } from '../symbols.js'
import { compareDigests } from './verdict.js'
import { SourceVerifier, type PendingContent } from './verifier.js'
import { isUploadRequest, type RunningUpload } from '../uploads/resumable.js'

type HookDone = (error?: Error) => void

/**
 * A reader that listens for 'error' answers the problem (Fastify's parsers send it to the error
 * handler); with none, nobody would, so the plugin does unless a reply went out already.
 */
function answerUnheard (problem: DigestProblem, heard: boolean, request: FastifyRequest, reply: FastifyReply): void {
  if (!heard && !reply.sent) sendProblem(problem, request, reply)
}

/**
 * Judges the digest fields of a request, then checks an empty content at once, or verifies the
 * content at its source, request.raw, whoever reads it. `attached` is given the verifier before
 * `done` lets the next hook run. The content of an upload creation or append also continues the
 * upload's running digest, so it is always taken over.
 */
export function verifyRequest (
  request: FastifyRequest,
  reply: FastifyReply,
  settings: Settings,
  settingsOf: TrailerWatch['settingsOf'],
  attached: (pending: PendingContent | null) => void,
  done: HookDone,
  upload: RunningUpload | null
): void {
  const headers = request.headers
  // An upload's Repr-Digest is the creation's, of every append together (resumable.ts).
  const partial = upload !== null || (settings.resumable !== null && isUploadRequest(headers)) ||
    isPartial(headers['content-range'])
  const refuse = (findings: readonly Finding[]): void => { done(problemFor(settings, findings)) }
  const { findings, expectations } = judgeFields(headers, settings, partial)
  if (findings.length > 0) return refuse(findings)
  const announced = announcedFields(headers)
  if (upload !== null && announced.includes('repr-digest')) return refuse([refusals.uploadReprTrailer()])
  const length = declaredLength(request)
  if (expectations.length === 0 && announced.length === 0) {
    if (settings.required && length !== 0 && upload?.checked !== true) {
      return refuse([refusals.missingField(settings.algorithms.keys())])
    }
    if (upload === null) {
      attached(watchTrailers(request, reply, settingsOf))
      done()
      return
    }
  }
  const transferCoding = keptTransferCoding(headers['transfer-encoding'])
  if (transferCoding !== null) return refuse([transferCoding])
  if (length === 0) {
    // The digest of empty content is well defined, and checking it here needs no stream at all:
    // Fastify skips body parsing for an empty request, so nothing would ever read one.
    const received = new Map(expectations.map(({ algorithm }) => [algorithm, algorithm.emptyDigest]))
    const verdict = compareDigests(expectations, { received, unencoded: null })
    if (Array.isArray(verdict)) return refuse(verdict)
    const whole = upload?.findings()
    if (whole != null) return refuse(whole)
    upload?.accept()
    if (verdict.fields.length > 0) request.digest = verdict
    done()
    return
  }
  // Unencoded-Digest covers the content with every content coding removed: decoded on the side when
  // a coding applies, and the bytes received otherwise.
  const unencodedAsked = announced.includes('unencoded-digest') ||
    expectations.some(({ field }) => field === 'unencoded-digest')
  const codings = contentCodings(headers['content-encoding'])
  const coded = !Array.isArray(codings) || codings.length > 0
  if (unencodedAsked && !Array.isArray(codings)) return refuse([codings])
  const decoded = unencodedAsked && coded
  // A field announced for the trailer section names its algorithms only at the end, so the content
  // is hashed with every algorithm the route supports.
  const supported = announced.length > 0 ? [...settings.algorithms.values()] : []
  const onReceived = (expectation: Expectation): boolean => !decoded || expectation.field !== 'unencoded-digest'
  const algorithmsOf = (checked: Expectation[]): Algorithm[] =>
    distinct([...checked.map(({ algorithm }) => algorithm), ...supported])
  const algorithms = algorithmsOf(expectations.filter(onReceived))
  const unencoded = decoded
    ? new UnencodedHasher(
      codings as string[], algorithmsOf(expectations.filter((e) => !onReceived(e))), request.routeOptions.bodyLimit
    )
    : null
  const delimiter = closeDelimiter(headers['content-type'])
  if (delimiter !== null && !Buffer.isBuffer(delimiter)) return refuse([delimiter])
  const source = request.raw
  // Bytes a reader took before this hook ran were never hashed: they cannot be verified.
  if (source.readableDidRead) {
    return refuse([refusals.readBeforeHook()])
  }
  const verifier = new SourceVerifier(source, {
    settings,
    expectations,
    algorithms,
    unencoded,
    partial,
    upload,
    coded,
    closeDelimiter: delimiter,
    verified (digest) { request.digest = digest },
    failed (problem, heard) { answerUnheard(problem, heard, request, reply) }
  })
  if (verifier.hashBuffered()) {
    if (verifier.cutShort) {
      verifier.abort()
      done()
    } else {
      verifier.judge((problem) => done(problem ?? undefined))
    }
    return
  }
  verifier.attach()
  attached(verifier)
  done()
}

type WatchedSource = Readable & {
  [kTrailerWatch]?: TrailerWatch | undefined
  trailers?: Record<string, string | undefined>
}

// Only the end is looked at: chunks pass straight on, noted for a wait that may watch them.
function pushWatchingTrailers (this: WatchedSource, chunk: Buffer | null): boolean {
  const watch = this[kTrailerWatch] as TrailerWatch
  if (chunk === null) return watch.end(this)
  if (watch.wait !== null) watch.wait.moved = true
  return Object.getPrototypeOf(this).push.call(this, chunk)
}

/**
 * A request without digest fields to check can still carry some in its trailer section (RFC 9530
 * sections 2 and 3): content that can have one (chunked HTTP/1.1, HTTP/2) is watched for its end,
 * at no cost per chunk beyond a call, and refused there when the trailer section has an integrity
 * field, since nothing announced it and the content was not hashed. Until then, like content being
 * verified, it holds back a success reply.
 */
export class TrailerWatch implements PendingContent {
  settled = false
  failure: Error | null = null
  wait: ContentWait | null = null

  constructor (
    readonly request: FastifyRequest,
    readonly reply: FastifyReply,
    readonly settingsOf: (request: FastifyRequest) => Settings | null
  ) {}

  get covered (): boolean {
    return this.settingsOf(this.request) !== null
  }

  /** Only on a route the plugin covers: a route with config.digest: false is never waited for. */
  whenSettled (waiter: Waiter | null, release: Release): void {
    const timeout = (this.settingsOf(this.request) as Settings).stallTimeout
    this.wait ??= new ContentWait(this.request.raw as unknown as Source, timeout, (error) => this.#giveUp(error))
    this.wait.add(waiter, release)
  }

  /** Ends the request of a client that stopped sending. */
  #giveUp (error: Error): void {
    this.settled = true
    this.failure = error
    this.detach()
    closeRequest(this.request.raw, error)
    this.wait?.settle(error)
  }

  /** Gives the request back, for a later registration's hook to judge with its own settings. */
  detach (): void {
    const source = this.request.raw as WatchedSource
    Reflect.deleteProperty(source, 'push')
    source[kTrailerWatch] = undefined
  }

  end (source: WatchedSource): boolean {
    this.settled = true
    this.detach()
    const settings = hasIntegrityTrailer(source.trailers) ? this.settingsOf(this.request) : null
    if (settings === null) {
      // Readers a wait let go before the end are told why, rather than seeing an end that looks complete.
      const cut = this.wait?.cut ?? null
      if (cut !== null) failSource(source, cut)
      const more = cut === null && source.push(null)
      this.wait?.settle(null)
      return more
    }
    const problem: DigestProblem = problemFor(settings, [refusals.unannouncedTrailer()])
    this.failure = problem
    const heard = failSource(source, problem)
    if (this.wait?.settle(problem) !== true) answerUnheard(problem, heard, this.request, this.reply)
    return false
  }
}

/** Watches the request's end for trailer fields, when its framing lets it have a trailer section. */
export function watchTrailers (request: FastifyRequest, reply: FastifyReply, settingsOf: TrailerWatch['settingsOf']):
TrailerWatch | null {
  const canHaveTrailers = request.raw.httpVersionMajor === 2
    ? declaredLength(request) !== 0
    : request.headers['transfer-encoding'] !== undefined
  if (!canHaveTrailers) return null
  const watch = new TrailerWatch(request, reply, settingsOf)
  const source = request.raw as WatchedSource
  source[kTrailerWatch] = watch
  source.push = pushWatchingTrailers
  return watch
}
