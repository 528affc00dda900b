/** The verification of one request, set up in onRequest: at the source when it has fields, else a trailer watch. */
import type { FastifyReply, FastifyRequest } from 'fastify'
import { distinct, type Algorithm } from '../fields/algorithms.js'
import { contentCodings, UnencodedHasher } from '../fields/unencoded.js'
import { refusals, type Finding } from '../findings.js'
import type { Settings } from '../options/settings.js'
import { problemFor, type DigestProblem } from '../problems/problems.js'
import type { RunningDigest } from './content-hashes.js'
import { failSource, isCutShort, type Source } from './source.js'
import { closeDelimiter, declaredLength, enforcedLength, isPartial, keptTransferCoding } from './framing.js'
import { announcedFields, judgeFields, type Expectation } from './judge-fields.js'
import type { PendingContent } from './pending-content.js'
import { watchTrailers, type SettingsOf } from './trailer-watch.js'
import { compareDigests, verifiedAs } from './verdict.js'
import { SourceVerifier } from './verifier.js'

/** How verifyRequest reports to the onRequest hook that called it. */
export interface RequestHook {
  readonly settingsOf: SettingsOf
  /** Given what follows the content (its verifier or trailer watch) before `done` lets the next hook run. */
  readonly attached: (pending: PendingContent | null) => void
  readonly done: (error?: Error) => void
}

/** An upload creation or append: its running digest, or null when the application knows no state of the upload. */
export interface UploadRequest {
  readonly running: RunningDigest | null
}

/**
 * Judges the digest fields of a request, then checks an empty content at once, or verifies the
 * content at its source, request.raw, whoever reads it. The content of an upload creation or
 * append also continues the upload's running digest, so it is always taken over.
 */
export function verifyRequest (request: FastifyRequest, reply: FastifyReply, settings: Settings, hook: RequestHook,
  uploadRequest: UploadRequest | null): void {
  const { settingsOf, attached, done } = hook
  const headers = request.headers
  const upload = uploadRequest?.running ?? null
  // An upload's Repr-Digest is the creation's, of every append together (uploads/resumable.ts).
  const partial = uploadRequest !== null || isPartial(headers['content-range'])
  const source = request.raw
  // Content that ended before this hook ran (behind an asynchronous hook) is refused in its stream
  // too, for a reader that waits for its end there.
  const ended = (source as unknown as Source)._readableState.ended
  const fail = (problem: DigestProblem): void => {
    if (ended) failSource(source, problem)
    done(problem)
  }
  const refuse = (findings: readonly Finding[]): void => { fail(problemFor(settings, findings)) }
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
    if (verdict.fields.length > 0) verifiedAs(request, verdict)
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
  // Content of an upload that neither carries a digest nor completes a checked upload has no verdict
  // to wait for but its length's: its readers have it as it arrives (draft section 4.4.2 asks that
  // an interrupted append be kept), all but its end.
  const compared = expectations.length > 0 || announced.length > 0 || upload === null || (upload.complete && upload.checked)
  const delimiter = compared ? closeDelimiter(headers['content-type']) : null
  if (delimiter !== null && !Buffer.isBuffer(delimiter)) return refuse([delimiter])
  // Bytes a reader took before this hook ran were never hashed, nor bytes buffered decoded (setEncoding()):
  // they cannot be verified.
  if (source.readableDidRead || (source.readableEncoding !== null && source.readableLength > 0)) {
    return refuse([refusals.readBeforeHook()])
  }
  const verifier = new SourceVerifier(source, {
    request,
    reply,
    settings,
    expectations,
    algorithms,
    unencoded,
    partial,
    upload,
    coded,
    closeDelimiter: delimiter,
    // An upload's running states are saved where readers' parts end (content-hashes.ts), which a
    // close delimiter's held start may put inside an earlier chunk: a multipart upload keeps the old hold.
    length: !compared ? Infinity : upload !== null && delimiter !== null ? NaN : enforcedLength(request, length)
  })
  if (verifier.takeBuffered()) {
    if (isCutShort(request.raw)) {
      verifier.abort()
      done()
    } else {
      verifier.judge((problem) => problem === null ? done() : fail(problem))
    }
    return
  }
  verifier.attach()
  attached(verifier)
  done()
}
