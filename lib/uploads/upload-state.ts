/**
 * The state of a resumable upload that the application stores with it, as JSON (version 1): read
 * and checked whole before any of it is used, since a store can be damaged or changed.
 */
import type { DigestAlgorithm } from '../types.js'
import { lookupAlgorithm, type Algorithm } from '../fields/algorithms.js'
import type { Expectation } from '../request/judge-fields.js'
import { stateFault, storedState } from './hash-states.js'

/** The state as the application stores it. */
interface StoredState {
  readonly v: 1
  /** The bytes of the upload the running digest covers. */
  readonly offset: number
  /** Set once a request completed the upload: it takes no more content. */
  readonly complete?: true
  /** The upload's length, once a request declared it or completed the upload (draft section 4.1.3). */
  readonly length?: number
  /** The creation's Repr-Digest, compared when the upload completes: base64 by algorithm key. */
  readonly expected: Readonly<Partial<Record<DigestAlgorithm, string>>>
  /** The algorithms the creation's Want-Repr-Digest chose, sent on later responses. */
  readonly want: readonly DigestAlgorithm[]
  /** The running hashes, as hash-wasm saved them: base64 by algorithm key. */
  readonly hashes: Readonly<Partial<Record<DigestAlgorithm, string>>>
}

/** An upload's state, read. */
export interface UploadState {
  readonly offset: number
  readonly complete: boolean
  readonly length: number | null
  readonly expected: readonly Expectation[]
  readonly want: readonly Algorithm[]
  /** The running hashes, in the order of `algorithms`. */
  readonly algorithms: readonly Algorithm[]
  readonly hashes: readonly Uint8Array[]
}

function fault (where: string): never {
  throw new Error(where)
}

const base64 = (bytes: Uint8Array): string => Buffer.from(bytes).toString('base64')

/** A record of base64 values by algorithm key, each decoded and checked by `check`. */
function entriesOf (value: unknown, name: string, check: (algorithm: Algorithm, bytes: Buffer) => string | null):
Array<[Algorithm, Buffer]> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) fault(`has no ${name}`)
  return Object.entries(value).map(([key, text]) => {
    const algorithm = lookupAlgorithm(key)
    if (algorithm === undefined) fault(`has an unknown algorithm ${JSON.stringify(key)} in ${name}`)
    const bytes = typeof text === 'string' ? Buffer.from(text, 'base64') : null
    // Only the base64 that state() writes: anything else was changed.
    if (bytes === null || base64(bytes) !== text) fault(`has ${name} ${key} that is not base64`)
    const wrong = check(algorithm, bytes)
    if (wrong !== null) fault(`has ${name} ${key} that ${wrong}`)
    return [algorithm, bytes]
  })
}

function readWhole (stored: unknown): UploadState {
  if (typeof stored !== 'string') fault('is not a string')
  let state: Partial<StoredState> | null
  try {
    state = JSON.parse(stored) as Partial<StoredState> | null
  } catch {
    return fault('is not JSON')
  }
  if (state?.v !== 1) fault('is not of version 1')
  const { offset, complete, length, want } = state
  if (typeof offset !== 'number' || !Number.isSafeInteger(offset) || offset < 0) fault('has no offset')
  if (length !== undefined && (typeof length !== 'number' || !Number.isSafeInteger(length) || length < offset)) {
    fault('has a length that is not a whole number of bytes at least its offset')
  }
  if (complete !== undefined && complete !== true) fault('has a bad completion mark')
  if (!Array.isArray(want)) fault('has no want list')
  const wanted = want.map((key: unknown) => lookupAlgorithm(String(key)) ??
    fault(`wants an unknown algorithm ${JSON.stringify(key)}`))
  const expected = entriesOf(state.expected, 'expected', ({ length }, bytes) =>
    bytes.length === length ? null : `is ${bytes.length} bytes, not ${length}`)
  const hashes = entriesOf(state.hashes, 'hashes', ({ key }, bytes) => stateFault(key, bytes, offset))
  const running = hashes.map(([algorithm]) => algorithm)
  const unhashed = [...expected.map(([algorithm]) => algorithm), ...wanted].find((one) => !running.includes(one))
  if (unhashed !== undefined) fault(`has no running hash for ${unhashed.key}`)
  return {
    offset,
    complete: complete === true,
    length: length ?? null,
    expected: expected.map(([algorithm, value]) => ({ field: 'repr-digest', header: 'Repr-Digest', algorithm, value })),
    want: wanted,
    algorithms: running,
    hashes: hashes.map(([, bytes]) => bytes)
  }
}

/** Reads a state the application stored; a string says where it broke. */
export function readState (stored: unknown): UploadState | string {
  try {
    return readWhole(stored)
  } catch (error) {
    return (error as Error).message
  }
}

/** The state to store, as JSON. */
export function writeState (state: UploadState): string {
  const stored: StoredState = {
    v: 1,
    offset: state.offset,
    ...(state.complete ? { complete: true } : {}),
    ...(state.length === null ? {} : { length: state.length }),
    expected: Object.fromEntries(state.expected.map(({ algorithm, value }) => [algorithm.key, base64(value)])),
    want: state.want.map(({ key }) => key),
    hashes: Object.fromEntries(state.algorithms.map(({ key }, i) =>
      [key, base64(storedState(key, state.hashes[i] as Uint8Array))]))
  }
  return JSON.stringify(stored)
}
