/**
 * The running hashes of resumable uploads, as hash-wasm's saved states: one WebAssembly instance an
 * algorithm serves every upload, loading an upload's state for each chunk and saving it after, so
 * that what a process holds does not grow with the uploads in progress (an instance reserves about
 * 10 GiB of address space, and a process has room for some thousands). A stored state is checked
 * whole before it is loaded: a bad digest length would make hash-wasm write past its state.
 */
import type { IHasher } from 'hash-wasm'
import type { DigestAlgorithm } from '../types.js'

/**
 * Where hash-wasm 4.13.0 keeps what in a saved state (its C structs, after a tag of its build):
 * the block being filled, the count of bytes hashed, the digest length, and bytes always zero.
 */
interface Layout {
  /** hash-wasm's function that makes an instance (hash-wasm is loaded when the first upload needs one). */
  readonly create: 'createSHA256' | 'createSHA512' | 'createMD5' | 'createSHA1'
  readonly size: number
  readonly tag: number
  readonly block: number
  readonly blockAt: number
  /** The count: of bytes in 64 bits, of bits in 64 bits (sha), or md5's 29-bit low and high words. */
  readonly count: 'bytes' | 'bits' | 'md5'
  readonly countAt: number
  readonly digestLength: readonly [at: number, value: number] | null
  readonly zero: readonly [from: number, to: number] | null
}

const layouts: Readonly<Record<DigestAlgorithm, Layout>> = {
  'sha-256': {
    create: 'createSHA256',
    size: 116,
    tag: 0x8ed695a3,
    block: 64,
    blockAt: 4,
    count: 'bytes',
    countAt: 68,
    digestLength: [108, 32],
    zero: [112, 116]
  },
  'sha-512': {
    create: 'createSHA512',
    size: 212,
    tag: 0x922e1bd0,
    block: 128,
    blockAt: 4,
    count: 'bytes',
    countAt: 132,
    digestLength: [204, 64],
    zero: [208, 212]
  },
  // md5's block[16] after its buffer is never used.
  md5: {
    create: 'createMD5',
    size: 156,
    tag: 0xdc3031df,
    block: 64,
    blockAt: 28,
    count: 'md5',
    countAt: 4,
    digestLength: null,
    zero: [92, 156]
  },
  sha: {
    create: 'createSHA1',
    size: 96,
    tag: 0xa5f2c72b,
    block: 64,
    blockAt: 32,
    count: 'bits',
    countAt: 24,
    digestLength: null,
    zero: null
  }
}

const hashers = new Map<DigestAlgorithm, IHasher>()

/**
 * Makes the algorithm's one instance, the first time an upload needs it: hash-wasm is loaded only
 * then, so that an application without resumable uploads never loads it.
 */
export async function prepareHasher (key: DigestAlgorithm): Promise<void> {
  if (!hashers.has(key)) {
    const hasher = await (await import('hash-wasm'))[layouts[key].create]()
    // Two uploads can ask at once: the first instance made is the one kept.
    if (!hashers.has(key)) hashers.set(key, hasher)
  }
}

function hasherOf (key: DigestAlgorithm): IHasher {
  return hashers.get(key) as IHasher
}

/** The state of a hash of nothing yet. */
export function initialState (key: DigestAlgorithm): Uint8Array {
  return hasherOf(key).init().save()
}

/** The state after `bytes` more. */
export function updateState (key: DigestAlgorithm, state: Uint8Array, bytes: Uint8Array): Uint8Array {
  return hasherOf(key).load(state).update(bytes).save()
}

export function digestOfState (key: DigestAlgorithm, state: Uint8Array): Buffer {
  return Buffer.from(hasherOf(key).load(state).digest('binary'))
}

/** The number of bytes a state has hashed, or null when its count cannot be one. */
function countOf (layout: Layout, state: Uint8Array): number | null {
  const view = Buffer.from(state.buffer, state.byteOffset, state.byteLength)
  const low = view.readUInt32LE(layout.countAt)
  const high = view.readUInt32LE(layout.countAt + 4)
  if (layout.count === 'md5') return low >= 2 ** 29 ? null : high * 2 ** 29 + low
  const count = high * 2 ** 32 + low
  if (layout.count === 'bytes') return count
  return low % 8 === 0 ? count / 8 : null
}

/**
 * Why a stored state cannot be the state of `offset` bytes of this build's hash, or null when it
 * can: its size and tag, its digest length, its count, and the bytes that are always zero.
 * A changed byte of the hash itself is not seen here: the upload's digest then does not match.
 */
export function stateFault (key: DigestAlgorithm, state: Uint8Array, offset: number): string | null {
  const layout = layouts[key]
  if (state.length !== layout.size) return `is ${state.length} bytes, not ${layout.size}`
  const view = Buffer.from(state.buffer, state.byteOffset, state.byteLength)
  if (view.readUInt32BE(0) !== layout.tag) return 'was saved by another build of hash-wasm'
  const digestLength = layout.digestLength
  if (digestLength !== null && view.readUInt32LE(digestLength[0]) !== digestLength[1]) return 'has a bad digest length'
  if (layout.zero !== null && view.subarray(...layout.zero).some((byte) => byte !== 0)) return 'has bytes that are always zero set'
  const count = countOf(layout, state)
  if (count !== offset) return `has not hashed the ${offset} bytes of its offset`
  // storedState() zeroes its block past the bytes hashed.
  const filled = layout.blockAt + count % layout.block
  if (view.subarray(filled, layout.blockAt + layout.block).some((byte) => byte !== 0)) return 'has bytes past those hashed set'
  return null
}

/**
 * A state as it is stored: the bytes of its block past those hashed are zeroed, since an instance
 * shared by every upload leaves other uploads' bytes there.
 */
export function storedState (key: DigestAlgorithm, state: Uint8Array): Uint8Array {
  const layout = layouts[key]
  const filled = layout.blockAt + (countOf(layout, state) as number) % layout.block
  return Uint8Array.from(state).fill(0, filled, layout.blockAt + layout.block)
}
