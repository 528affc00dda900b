/**
 * Resumable uploads (draft-ietf-httpbis-resumable-upload-15) with RFC 9530's Repr-Digest: the
 * creation's covers the whole representation, every append together. The upload's running digest
 * is hashed at the source like any content, carried from one request to the next as a state the
 * application stores with the upload, and compared when a request completes the upload; its
 * length indications must agree (draft section 4.1.3).
 */
import type { FastifyRequest } from 'fastify'
import type { IncomingHttpHeaders } from 'node:http'
import type { DigestAlgorithm, ResumableUpload } from '../types.js'
import { distinct, type Algorithm } from '../fields/algorithms.js'
import { announcedFields, judgeFields } from '../request/judge-fields.js'
import { refusals, type Finding } from '../findings.js'
import type { ResumableSettings, Settings } from '../options/settings.js'
import type { Members } from '../fields/dictionary.js'
import { chosen, preferencesOf } from '../fields/preferences.js'
import { DigestProblem, problemFor } from '../problems/problems.js'
import { mismatchingUploadOffset } from '../problems/upload-problems.js'
import { declaredLength } from '../request/framing.js'
import { compareDigests } from '../request/verdict.js'
import { digestOfState, initialState, prepareHasher } from './hash-states.js'
import { readState, writeState, type UploadState } from './upload-state.js'
import { uploadFieldsOf, uploadLengthAfter } from './upload-fields.js'
import { RunningHashes } from './running-hashes.js'

/** Whether a request appends to an upload: a PATCH document of type application/partial-upload. */
function isAppend (headers: IncomingHttpHeaders): boolean {
  const type = headers['content-type']
  return type !== undefined && type.split(';', 1)[0]?.trim().toLowerCase() === 'application/partial-upload'
}

/** Whether a request creates an upload (it says whether it completes it) or appends to one. */
export function isUploadRequest (headers: IncomingHttpHeaders): boolean {
  return headers['upload-complete'] !== undefined || isAppend(headers)
}

/**
 * Whether the bytes of a request cut short may be kept: not when it carries a digest of its own
 * content, which they were never verified against (a Repr-Digest on an append is not compared).
 */
function partsKept (headers: IncomingHttpHeaders): boolean {
  return headers['content-digest'] === undefined && headers['unencoded-digest'] === undefined &&
    announcedFields(headers).every((field) => field === 'repr-digest')
}

/** Content past the upload's length, or short of it on completion (section 4.1.3); else null. */
function lengthFinding (length: number | null, offset: number, content: number, complete: boolean): Finding | null {
  if (uploadLengthAfter(length, { offset, declared: null, content, complete }) !== 'inconsistent') return null
  const detail = `the upload is ${String(length)} bytes long, and ${complete ? 'completing it' : 'an append'} at ${offset} brought ${content}`
  return { kind: 'upload-length', detail }
}

interface Ended { readonly digests: Map<Algorithm, Buffer>, readonly state: string }

/**
 * The answer to an append whose stored state does not read: the upload cannot go on. The client
 * is told no more; the log says where the state broke, at the level of a fault of the server's.
 */
function unreadableState (settings: Settings, where: string): DigestProblem {
  const problem = problemFor(settings, [refusals.uploadStateUnreadable()])
  problem.logMessage = `${problem.logMessage}: the state loadState gave ${where}`
  problem.logLevel = 'error'
  return problem
}

/**
 * An upload creation or append on a resumable route: its running digest, continued from the state
 * the application stored, and what the request says of the upload.
 */
export class RunningUpload implements ResumableUpload {
  readonly #started: UploadState
  readonly #running: RunningHashes
  // The upload's length as the request's header section left it known, or null.
  readonly #length: number | null
  // What this request's content makes of the upload, once it is complete; stored once verified.
  #ended: Ended | null = null
  #accepted = false
  /** The comparison of the whole upload failed: the upload is over. */
  failed = false

  // Parts of the content are kept only when the request carries no digest of its own content.
  constructor (readonly creation: boolean, readonly complete: boolean, started: UploadState, length: number | null, partsKept: boolean) {
    this.#started = started
    this.#running = new RunningHashes(started.algorithms, started.hashes, partsKept)
    this.#length = length
  }

  get offset (): number {
    return this.#started.offset
  }

  get length (): number | null {
    return this.#accepted && this.complete ? this.offset + this.#running.received : this.#length
  }

  /** Whether a Repr-Digest of the whole upload is compared when it completes. */
  get checked (): boolean {
    return this.#started.expected.length > 0
  }

  update (bytes: Buffer): void {
    this.#running.update(bytes)
  }

  /**
   * What refuses the upload once this request's content ended: content past its length, or short
   * of it on completion, or the mismatches of its whole digest; else null. Either ends the upload.
   */
  findings (): Finding[] | null {
    const overrun = lengthFinding(this.#length, this.offset, this.#running.received, this.complete)
    if (overrun !== null) {
      this.failed = true
      return [overrun]
    }
    if (!this.complete || !this.checked) return null
    const verdict = compareDigests(this.#started.expected, { received: this.#end().digests, unencoded: null })
    if (!Array.isArray(verdict)) return null
    this.failed = true
    return verdict
  }

  accept (): void {
    this.#end()
    this.#accepted = true
  }

  /**
   * Once the content is verified and kept, the state after it; else the one it started from with
   * the length its header made known (recorded however the request ends, 4.1.3).
   */
  state ({ contentKept = true } = {}): string {
    return this.#accepted && contentKept ? this.#end().state : writeState({ ...this.#started, length: this.#length })
  }

  stateAt (offset: number): string | null {
    if (this.failed || !Number.isSafeInteger(offset)) return null
    const whole = this.#accepted && offset === this.offset + this.#running.received
    const hashes = whole ? this.#running.hashes : this.#running.at(offset - this.offset)
    return hashes === null ? null : writeState({ ...this.#started, offset, hashes, length: this.length })
  }

  digests (): Partial<Record<DigestAlgorithm, Buffer>> {
    if (!this.#accepted) return {}
    return Object.fromEntries([...this.#end().digests].map(([algorithm, digest]) => [algorithm.key, digest]))
  }

  /** The algorithms a response to this request may send the upload's Repr-Digest with, by the creation's want. */
  get want (): readonly Algorithm[] {
    return this.#started.want
  }

  /** Digests and state of everything received, taken once the content is complete. */
  #end (): Ended {
    if (this.#ended !== null) return this.#ended
    const { algorithms } = this.#started
    const { hashes, received } = this.#running
    this.#ended = {
      digests: new Map(algorithms.map((algorithm, i) => [algorithm, digestOfState(algorithm.key, hashes[i] as Uint8Array)])),
      state: writeState({
        ...this.#started,
        offset: this.offset + received,
        complete: this.complete,
        length: this.complete ? this.offset + received : this.#length,
        hashes
      })
    }
    return this.#ended
  }
}

/**
 * The running upload of a creation or append (isUploadRequest) on a resumable route; null for an
 * append to an upload the application knows no state of; or the problem that refuses it before
 * any content: an Upload-Complete that is not a Boolean, or an append at another offset (409).
 */
export async function startUpload (request: FastifyRequest, settings: Settings, resumable: ResumableSettings):
Promise<RunningUpload | DigestProblem | null> {
  const headers = request.headers
  const append = isAppend(headers)
  // A resource creates uploads or takes appends as its route says: an append route's request is
  // never taken for a new upload, nor the other way round.
  if (append ? resumable.loadState === null : !resumable.creation) return problemFor(settings, [refusals.uploadRole(append)])
  const fields = uploadFieldsOf(headers)
  const complete = fields.complete
  if (complete === null) return problemFor(settings, [refusals.uploadComplete()])
  // Section 4.1.3: the length declared and the one a completing request's content gives agree,
  // with each other and with what an earlier request said; no content goes past it.
  const content = declaredLength(request)
  const lengthOf = (known: number | null, offset: number): number | null | DigestProblem => {
    const length = uploadLengthAfter(known, { offset, declared: fields.length, content: Number.isNaN(content) ? null : content, complete })
    if (length !== 'inconsistent') return length
    const detail = `Upload-Length ${String(fields.length)}, Content-Length ${Number.isNaN(content) ? 'none' : content} at offset ${offset}` +
      `${complete ? ' completing the upload' : ''}, the length known ${String(known)}`
    return problemFor(settings, [{ kind: 'upload-length', detail }])
  }
  if (!append) {
    const { findings, expectations } = judgeFields(headers, settings, false)
    // A field that does not pass is refused with the request's other fields, where it is judged again.
    if (findings.length > 0) return null
    const expected = expectations.filter(({ field }) => field === 'repr-digest')
    const wanted = preferencesOf(headers['want-repr-digest'])
    const want = wanted === null ? [] : [chosen(settings.algorithms, wanted, () => true)].filter((one) => one !== null)
    const algorithms = distinct([...expected.map(({ algorithm }) => algorithm), ...want])
    await Promise.all(algorithms.map(async ({ key }) => await prepareHasher(key)))
    const hashes = algorithms.map(({ key }) => initialState(key))
    const length = lengthOf(null, 0)
    if (length instanceof DigestProblem) return length
    return new RunningUpload(true, complete, { offset: 0, complete: false, length, expected, want, algorithms, hashes }, length, partsKept(headers))
  }
  const stored = await (resumable.loadState as (request: FastifyRequest) => unknown)(request)
  if (stored == null) return null
  const state = readState(stored)
  if (typeof state === 'string') return unreadableState(settings, state)
  if (state.complete) return problemFor(settings, [refusals.uploadCompleted()])
  if (fields.offset !== state.offset) return mismatchingUploadOffset(settings, state.offset, fields.offset)
  const length = lengthOf(state.length, state.offset)
  if (length instanceof DigestProblem) return length
  await Promise.all(state.algorithms.map(async ({ key }) => await prepareHasher(key)))
  return new RunningUpload(false, complete, state, length, partsKept(headers))
}

/**
 * The upload's digests so far, for a success answering a creation or append without content of
 * its own, and the preferences of the creation's Want-Repr-Digest, which the request's replace.
 */
export function uploadReprDigests (request: FastifyRequest, status: number, payload: unknown):
{ readonly digests: Partial<Record<DigestAlgorithm, Buffer>>, readonly want: Members | null } | null {
  const upload = request.resumableUpload as RunningUpload | null
  if (upload === null || status < 200 || status >= 300) return null
  // A response with content of its own (the completing one's) is a representation of its own.
  const empty = status === 204 || payload == null || (payload as { length?: number }).length === 0
  if (!empty) return null
  const want = upload.want.length === 0 ? null : new Map(upload.want.map(({ key }) => [key, [1, new Map()]]))
  return { digests: upload.digests(), want: want as Members | null }
}
