/** The hashing algorithms of the IANA registry (RFC 9530 section 5) that the plugin computes, by key. */
import { createHash, hash, type Hash } from 'node:crypto'
import type { DigestAlgorithm } from '../types.js'

/** One entry of the IANA "Hash Algorithms for HTTP Digest Fields" registry that Node can compute. */
export interface Algorithm {
  readonly key: DigestAlgorithm
  /** Decoded length of every value the algorithm can produce (RFC 9530 section 5). */
  readonly length: number
  /** Deprecated keys are unsupported unless an application lists them explicitly. */
  readonly deprecated: boolean
  /** Digest of zero bytes, so that an empty body is checked without reading a stream. */
  readonly emptyDigest: Buffer
  createHash (): Hash
  /** Digest of one buffer: no Hash object to set up, which is most of the cost for a small body. */
  digest (data: Buffer | string): Buffer
}

function algorithm (key: DigestAlgorithm, nodeName: string, length: number, deprecated: boolean): Algorithm {
  return {
    key,
    length,
    deprecated,
    emptyDigest: createHash(nodeName).digest(),
    createHash: () => createHash(nodeName),
    digest: (data) => hash(nodeName, data, 'buffer')
  }
}

const registry = new Map<string, Algorithm>([
  ['sha-256', algorithm('sha-256', 'sha256', 32, false)],
  ['sha-512', algorithm('sha-512', 'sha512', 64, false)],
  ['md5', algorithm('md5', 'md5', 16, true)],
  ['sha', algorithm('sha', 'sha1', 20, true)]
])

/** Registered keys that are not hash functions or that Node cannot compute; named to explain a refusal. */
const unimplemented = new Set(['unixsum', 'unixcksum', 'adler', 'crc32c'])

/** Each algorithm once, in the order first named. */
export function distinct (algorithms: Iterable<Algorithm>): Algorithm[] {
  return [...new Set(algorithms)]
}

export function lookupAlgorithm (key: string): Algorithm | undefined {
  return registry.get(key)
}

export function isUnimplementedAlgorithm (key: string): boolean {
  return unimplemented.has(key)
}
