/**
 * Resumable uploads (draft-ietf-httpbis-resumable-upload-12, "Integrity Digests"): the Repr-Digest
 * of the upload creation covers every append together. The upload's running digest is hashed at the
 * source like any content, carried from one request to the next as a state the application stores
 * with the upload, and compared when a request completes the upload.
 */
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { IncomingHttpHeaders } from 'node:http'
import { createMD5, createSHA1, createSHA256, createSHA512, type IHasher } from 'hash-wasm'
import { parseItem } from 'structured-headers'
import type { DigestAlgorithm, ResumableUpload } from './types.js'
import { distinct, lookupAlgorithm, type Algorithm } from './algorithms.js'
import { invalidOption, problemCodes } from './errors.js'
import { judgeFields, type Expectation } from './fields.js'
import { refusals, type Finding } from './findings.js'
import type { Settings } from './options.js'
import type { Members } from './dictionary.js'
import { chosen, preferencesOf } from './preferences.js'
import { DigestProblem, problemFor } from './problems.js'
import { mismatchingUploadOffsetSchema } from './schemas.js'
import { compareDigests } from './verdict.js'

/**
 * What a route's `config.digest.resumable` says: whether it creates uploads, and, on an upload
 * resource, where the state of the upload an append names is.
 */
export interface ResumableSettings {
  readonly creation: boolean
  readonly loadState: ((request: FastifyRequest) => unknown) | null
}

// Node's hashes cannot be saved and restored; hash-wasm's can, and were the fastest that can
// (docs/resumable-uploads.md has the measurements).
const hashers: Readonly<Record<DigestAlgorithm, () => Promise<IHasher>>> = {
  'sha-256': createSHA256,
  'sha-512': createSHA512,
  md5: createMD5,
  sha: createSHA1
}

// A hasher is a WebAssembly instance, which costs more to set up than a small append costs to hash:
// each is used again once its request's digests are taken, and at most `maxIdle` of an algorithm
// wait for the next request.
const idle = new Map<DigestAlgorithm, IHasher[]>()
const maxIdle = 64

async function hasherFor (key: DigestAlgorithm): Promise<IHasher> {
  return idle.get(key)?.pop() ?? await hashers[key]()
}

function putBack (key: DigestAlgorithm, hasher: IHasher): void {
  const waiting = idle.get(key) ?? []
  if (waiting.length < maxIdle) waiting.push(hasher)
  idle.set(key, waiting)
}

/** The state the application stores, as JSON: version 1. */
interface StoredState {
  readonly v: 1
  /** The bytes of the upload the running digest covers. */
  readonly offset: number
  /** The creation's Repr-Digest, compared when the upload completes: base64 by algorithm key. */
  readonly expected: Readonly<Partial<Record<DigestAlgorithm, string>>>
  /** The algorithms the creation's Want-Repr-Digest chose, sent on later responses. */
  readonly want: readonly DigestAlgorithm[]
  /** The running hashes, as hash-wasm saved them: base64 by algorithm key. */
  readonly hashes: Readonly<Partial<Record<DigestAlgorithm, string>>>
}

const integer = /^[ ]*[0-9]+(?![0-9.])/

function broken (where: string): never {
  throw invalidOption('config.digest.resumable.loadState', `the stored state ${where}`)
}

function algorithmRecord (value: unknown, name: string): Array<[Algorithm, Buffer]> {
  if (typeof value !== 'object' || value === null) broken(`has no ${name}`)
  return Object.entries(value).map(([key, text]) => {
    const algorithm = lookupAlgorithm(key)
    if (algorithm === undefined || typeof text !== 'string') broken(`has a bad ${name} entry ${JSON.stringify(key)}`)
    return [algorithm, Buffer.from(text, 'base64')]
  })
}

/** Reads a state the application stored, saying where it broke. */
function parseState (stored: unknown): { offset: number, expected: Expectation[], want: Algorithm[], hashes: Array<[Algorithm, Buffer]> } {
  if (typeof stored !== 'string') broken('is not a string')
  let state: Partial<StoredState>
  try {
    state = JSON.parse(stored) as Partial<StoredState>
  } catch {
    return broken('is not JSON')
  }
  if (state?.v !== 1) broken('is not of version 1')
  const { offset, want } = state
  if (typeof offset !== 'number' || !Number.isSafeInteger(offset) || offset < 0) broken('has no offset')
  if (!Array.isArray(want)) broken('has no want list')
  return {
    offset,
    expected: algorithmRecord(state.expected, 'expected')
      .map(([algorithm, value]) => ({ field: 'repr-digest', header: 'Repr-Digest', algorithm, value })),
    want: want.map((key) => lookupAlgorithm(String(key)) ?? broken(`wants an unknown algorithm ${JSON.stringify(key)}`)),
    hashes: algorithmRecord(state.hashes, 'hashes')
  }
}

/** An Item field's value (RFC 9651), or null when absent or not an Item, which the draft ignores. */
function itemOf (value: string | string[] | undefined): unknown {
  if (typeof value !== 'string') return null
  try {
    return parseItem(value)[0]
  } catch {
    return null
  }
}

/** Upload-Offset: a non-negative Integer, parameters ignored; else null. */
function offsetOf (value: string | string[] | undefined): number | null {
  const item = itemOf(value)
  // structured-headers gives a Decimal as a number too: only digits without a point are an Integer.
  return typeof item === 'number' && integer.test(String(value)) ? item : null
}

/** Whether a request appends to an upload: a PATCH document of type application/partial-upload. */
function isAppend (headers: IncomingHttpHeaders): boolean {
  const type = headers['content-type']
  return type !== undefined && type.split(';', 1)[0]?.trim().toLowerCase() === 'application/partial-upload'
}

/** Whether a request creates an upload (it says whether it completes it) or appends to one. */
export function isUploadRequest (headers: IncomingHttpHeaders): boolean {
  return headers['upload-complete'] !== undefined || isAppend(headers)
}

/** The draft's 409 answer to an append at an offset other than the upload's. */
function mismatchingOffset (settings: Settings, expected: number, provided: number | null): DigestProblem {
  const type = `${settings.typeBase}mismatching-upload-offset`
  const title = 'offset from request does not match offset of resource'
  const document = { type, title, 'expected-offset': expected, ...(provided === null ? {} : { 'provided-offset': provided }) }
  const headers = { 'upload-offset': String(expected), 'upload-complete': '?0' }
  const problem = new DigestProblem(type, `${title}: expected ${expected}, got ${provided ?? 'none'}`,
    document as never, mismatchingUploadOffsetSchema as never, headers, 409)
  problem.code = problemCodes[409]
  problem.logMessage = problem.message
  problem.logLevel = settings.problemLogLevel
  return problem
}

/**
 * An upload creation or append on a resumable route: its running digest, continued from the state
 * the application stored, and what the request says of the upload.
 */
export class RunningUpload implements ResumableUpload {
  readonly #start: number
  readonly #algorithms: readonly Algorithm[]
  #hashers: readonly IHasher[]
  readonly #expected: readonly Expectation[]
  readonly #want: readonly Algorithm[]
  #received = 0
  #state: string
  #digests: Map<Algorithm, Buffer> | null = null
  #accepted = false
  /** The comparison of the whole upload failed: the upload is over. */
  failed = false

  constructor (
    readonly creation: boolean,
    readonly complete: boolean,
    offset: number,
    algorithms: readonly Algorithm[],
    running: readonly IHasher[],
    expected: readonly Expectation[],
    want: readonly Algorithm[]
  ) {
    this.#start = offset
    this.#algorithms = algorithms
    this.#hashers = running
    this.#expected = expected
    this.#want = want
    this.#state = this.#serialize(offset, running.map((hasher) => hasher.save()))
  }

  get offset (): number {
    return this.#start
  }

  /** Whether a Repr-Digest of the whole upload is compared when it completes. */
  get checked (): boolean {
    return this.#expected.length > 0
  }

  update (bytes: Buffer): void {
    this.#received += bytes.length
    for (const hasher of this.#hashers) hasher.update(bytes)
  }

  /** The mismatches of the whole upload's digest, when this request completes it; else null. */
  findings (): Finding[] | null {
    if (!this.complete || this.#expected.length === 0) return null
    const verdict = compareDigests(this.#expected, { received: this.#finish(), unencoded: null })
    if (!Array.isArray(verdict)) return null
    this.failed = true
    return verdict
  }

  /** The content was verified: the stored state now covers it too. */
  accept (): void {
    this.#finish()
    this.#accepted = true
  }

  state (): string {
    return this.#state
  }

  digests (): Partial<Record<DigestAlgorithm, Buffer>> {
    if (!this.#accepted) return {}
    return Object.fromEntries([...this.#finish()].map(([algorithm, digest]) => [algorithm.key, digest]))
  }

  /** The algorithms a response to this request may send the upload's Repr-Digest with, by the creation's want. */
  get want (): readonly Algorithm[] {
    return this.#want
  }

  /**
   * Digests and state of everything received, taken once the content is complete; the hashers then
   * go back for other requests, and nothing more reaches them.
   */
  #finish (): Map<Algorithm, Buffer> {
    if (this.#digests !== null) return this.#digests
    const saved = this.#hashers.map((hasher) => hasher.save())
    this.#digests = new Map(this.#hashers.map((hasher, i) => {
      const algorithm = this.#algorithms[i] as Algorithm
      const digest = Buffer.from(hasher.digest('binary'))
      putBack(algorithm.key, hasher)
      return [algorithm, digest]
    }))
    this.#hashers = []
    this.#state = this.#serialize(this.#start + this.#received, saved)
    return this.#digests
  }

  #serialize (offset: number, saved: readonly Uint8Array[]): string {
    const base64 = (bytes: Uint8Array): string => Buffer.from(bytes).toString('base64')
    const state: StoredState = {
      v: 1,
      offset,
      expected: Object.fromEntries(this.#expected.map(({ algorithm, value }) => [algorithm.key, base64(value)])),
      want: this.#want.map(({ key }) => key),
      hashes: Object.fromEntries(this.#algorithms.map(({ key }, i) => [key, base64(saved[i] as Uint8Array)]))
    }
    return JSON.stringify(state)
  }
}

async function running (algorithms: readonly Algorithm[], states: ReadonlyArray<Buffer | null>): Promise<IHasher[]> {
  const made = await Promise.all(algorithms.map(async ({ key }) => await hasherFor(key)))
  made.forEach((hasher, i) => {
    const state = states[i]
    if (state == null) {
      hasher.init()
      return
    }
    try {
      hasher.load(state)
    } catch (error) {
      broken(`does not load: ${(error as Error).message}`)
    }
  })
  return made
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
  const complete = itemOf(headers['upload-complete'])
  if (typeof complete !== 'boolean') return problemFor(settings, [refusals.uploadComplete()])
  if (!append) {
    const { findings, expectations } = judgeFields(headers, settings, false)
    // A field that does not pass is refused with the request's other fields, where it is judged again.
    if (findings.length > 0) return null
    const expected = expectations.filter(({ field }) => field === 'repr-digest')
    const wanted = preferencesOf(headers['want-repr-digest'])
    const want = wanted === null ? null : chosen(settings, wanted, () => true)
    const algorithms = distinct([...expected.map(({ algorithm }) => algorithm), ...(want === null ? [] : [want])])
    const hashes = await running(algorithms, algorithms.map(() => null))
    return new RunningUpload(true, complete, 0, algorithms, hashes, expected, want === null ? [] : [want])
  }
  const stored = await (resumable.loadState as (request: FastifyRequest) => unknown)(request)
  if (stored == null) return null
  const state = parseState(stored)
  const provided = offsetOf(headers['upload-offset'])
  if (provided !== state.offset) return mismatchingOffset(settings, state.offset, provided)
  const algorithms = state.hashes.map(([algorithm]) => algorithm)
  const hashes = await running(algorithms, state.hashes.map(([, saved]) => saved))
  return new RunningUpload(false, complete, state.offset, algorithms, hashes, state.expected, state.want)
}

/** Upload-Complete on the plugin's problem answering a creation or append (draft section "Upload Append"). */
export function uploadCompleteOf (request: FastifyRequest, reply: FastifyReply): void {
  const upload = request.resumableUpload as RunningUpload | null
  if (upload !== null) reply.header('upload-complete', upload.failed ? '?1' : '?0')
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
