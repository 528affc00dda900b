/** Digests of files, computed once for each version of a file and kept by what identifies its bytes. */
import { fstat as fstatCallback, type BigIntStats, type ReadStream } from 'node:fs'
import { promisify } from 'node:util'
import { open, stat } from 'node:fs/promises'
import type { Algorithm } from '../fields/algorithms.js'
import { digestsOf } from '../fields/unencoded.js'
import type { FileDigestLimits } from '../options/settings.js'

/** A file a response sends, or would send (HEAD, 304): its path, and the stream reading it if any. */
export interface FileRef {
  readonly path: string
  readonly stream?: ReadStream
}

export type FileDigestValues = ReadonlyMap<Algorithm, Buffer>

/**
 * A file's digests, or null when they are to be found as it is sent. Then `settle` says, once it was,
 * whether the bytes sent were the version's (as many, and the file unchanged after), and remembers
 * their digests if they were all of it: a response that sent anything else must not end as complete.
 */
export interface FileDigestsFound {
  readonly values: FileDigestValues | null
  readonly settle: (values: FileDigestValues | null, sent: number) => Promise<boolean>
}

// A file changed within this long of being hashed may have changed again within the same tick of
// its file system's clock without its times or size telling (Linux stamps files with a coarse
// clock; FAT with 2 s): its digest serves the response that hashed it and is not kept.
const settleTime = 2_000_000_000n

const chunkSize = 64 * 1024
const fstat = promisify(fstatCallback) as (fd: number, options: { bigint: true }) => Promise<BigIntStats>

function versionOf (stats: BigIntStats): string {
  return `${stats.dev}:${stats.ino}:${stats.size}:${stats.mtimeNs}:${stats.ctimeNs}`
}

/** Whether the file last changed long enough before `since` for a change after it to change its times. */
function settled (stats: BigIntStats, since: bigint): boolean {
  // The change time moves with every write and every utimes(), and nothing can set it back.
  return stats.ctimeNs + settleTime < since
}

/** A version's digests, and whether the file had settled when they were found (else they are found again). */
interface Entry {
  readonly values: FileDigestValues
  readonly settled: boolean
}

/** How many bytes of a file of `size` bytes a stream reads (all of it when there is no stream). */
function lengthRead (stream: ReadStream | undefined, size: bigint): number {
  const { start = 0, end = Infinity } = (stream ?? {}) as { start?: number, end?: number }
  return Math.max(0, Math.min(end, Number(size) - 1) - start + 1)
}

/** Waits for a stream to open its file: a failure to open, or a close before, is no file. */
async function opening (stream: ReadStream): Promise<void> {
  if (stream.destroyed) throw new Error('the stream closed before it opened its file')
  await new Promise<void>((resolve, reject) => {
    const opened = (): void => {
      stream.off('close', closed).off('error', closed)
      resolve()
    }
    // Until the hook hands the stream on, this is the only listener of its error: without it, a
    // file that cannot be opened would take the process down.
    const closed = (): void => {
      stream.off('ready', opened).off('close', closed).off('error', closed)
      reject(new Error('the stream closed before it opened its file'))
    }
    stream.once('ready', opened).once('close', closed).once('error', closed)
  })
}

// A response's two hooks ask for the same stream's file: its stats are read once, and what one
// hook hashed serves the other.
const streamStats = new WeakMap<ReadStream, Promise<BigIntStats>>()
const streamDigests = new WeakMap<ReadStream, { version: string, values: FileDigestValues }>()

/** The stats of the file a stream reads (its own descriptor, once open), or of the path. */
async function statsOf (file: FileRef): Promise<BigIntStats> {
  const stream = file.stream
  if (stream === undefined) return await stat(file.path, { bigint: true })
  let stats = streamStats.get(stream)
  if (stats === undefined) {
    stats = streamStatsOf(stream)
    streamStats.set(stream, stats)
  }
  return await stats
}

async function streamStatsOf (stream: ReadStream): Promise<BigIntStats> {
  if (stream.pending) await opening(stream)
  const stats = await fstat((stream as ReadStream & { fd: number }).fd, { bigint: true })
  // A descriptor number is reused once closed: the stream must still own it when its stats come back.
  if (stream.destroyed) throw new Error('the stream closed its file')
  return stats
}

/** Hashes the file through a descriptor of its own: null unless it still is the version of `stats` after. */
async function hashFile (path: string, stats: BigIntStats, algorithms: readonly Algorithm[], codings: readonly string[]):
Promise<Map<Algorithm, Buffer> | null> {
  const handle = await open(path, 'r')
  try {
    const hasher = digestsOf(codings, algorithms)
    const buffer = Buffer.allocUnsafe(chunkSize)
    // Up to the size the version has: a file that grew or shrank meanwhile is another version.
    let position = 0
    while (position < stats.size) {
      const { bytesRead } = await handle.read(buffer, 0, chunkSize, position)
      if (bytesRead === 0) break
      position += bytesRead
      hasher.write(buffer.subarray(0, bytesRead))
      await new Promise<void>((resolve) => hasher.whenDrained(resolve))
    }
    const result = await new Promise<Map<Algorithm, Buffer> | null>((resolve) => hasher.end(resolve))
    const after = await handle.stat({ bigint: true })
    return BigInt(position) === stats.size && versionOf(after) === versionOf(stats) ? result : null
  } finally {
    await handle.close()
  }
}

/**
 * The digests of files by version (device, inode, size, modification and change times, and the
 * codings removed), so that a file is hashed once and a changed file never gets an old digest.
 */
export class FileDigests {
  readonly #entries = new Map<string, Entry>()
  readonly #hashing = new Map<string, Promise<Map<Algorithm, Buffer> | null>>()
  readonly #limits: FileDigestLimits

  constructor (limits: FileDigestLimits) {
    this.#limits = limits
  }

  /**
   * The digests of the file (with `codings` removed, in the order they were applied): from the
   * cache, or by hashing it now when it is small enough or `mustHash`. Otherwise `values` is null
   * (always for a stream over part of the file) and `settle` checks what was sent. Null for a file
   * that cannot be read or changed while it was hashed.
   */
  async digests (file: FileRef, algorithms: readonly Algorithm[], codings: readonly string[], mustHash: boolean):
  Promise<FileDigestsFound | null> {
    const stats = await statsOf(file).catch(() => null)
    // Only a regular file with a size says what it holds: /proc files and devices report none.
    if (stats === null || !stats.isFile() || stats.size === 0n) return null
    const version = `${versionOf(stats)}:${codings.join(',')}`
    const length = lengthRead(file.stream, stats.size)
    const whole = length === Number(stats.size)
    const since = BigInt(Date.now()) * 1_000_000n
    // The same version after, or a file renamed over it (the stream read the one it opened); only
    // the digests of the whole file are kept.
    const settle = async (values: FileDigestValues | null, sent: number): Promise<boolean> => {
      const after = await stat(file.path, { bigint: true }).catch(() => null)
      const same = after !== null && versionOf(after) === versionOf(stats)
      if (same && whole && values !== null && sent === length) this.#remember(version, values, settled(stats, since))
      return sent === length && (same || (after !== null && after.ino !== stats.ino))
    }
    if (!whole) return { values: null, settle }
    const entry = this.#recall(version)
    // A response's own stream keeps what its first hook found, trusted or not: the same bytes.
    const sending = file.stream === undefined ? undefined : streamDigests.get(file.stream)
    const known = entry?.settled === true ? entry.values : sending?.version === version ? sending.values : undefined
    const missing = algorithms.filter((algorithm) => known?.has(algorithm) !== true)
    if (missing.length === 0) return { values: known as FileDigestValues, settle }
    // A version seen before, but too recent to be trusted then, is hashed again whatever its size.
    const large = stats.size > this.#limits.hashBeforeSending
    if (!mustHash && entry === undefined && large) return { values: null, settle }
    // Requests that arrive together for a version not known yet share one hash of it.
    const job = `${version}|${missing.map((algorithm) => algorithm.key).join()}`
    let hashing = this.#hashing.get(job)
    if (hashing === undefined) {
      hashing = hashFile(file.path, stats, missing, codings).catch(() => null)
      this.#hashing.set(job, hashing)
      hashing.then(() => this.#hashing.delete(job))
    }
    const hashed = await hashing
    if (hashed === null) return null
    const values = new Map([...(known ?? []), ...hashed])
    this.#remember(version, values, settled(stats, since))
    if (file.stream !== undefined) streamDigests.set(file.stream, { version, values })
    return { values, settle }
  }

  /** Keeps a version's digests; unsettled ones only say that the version was seen. */
  #remember (version: string, values: FileDigestValues, trusted: boolean): void {
    const entries = this.#entries
    const before = entries.get(version)
    const merged = new Map([...(before?.settled === true ? before.values : []), ...values])
    entries.delete(version)
    entries.set(version, { values: merged, settled: trusted })
    if (entries.size > this.#limits.maxEntries) entries.delete(entries.keys().next().value as string)
  }

  /** A version's digests, now the most recently used. */
  #recall (version: string): Entry | undefined {
    const values = this.#entries.get(version)
    if (values !== undefined) {
      this.#entries.delete(version)
      this.#entries.set(version, values)
    }
    return values
  }
}
