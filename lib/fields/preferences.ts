/** Want-* preferences (RFC 9530 section 4), and the fields and Vary that answer them. */
import type { FastifyReply } from 'fastify'
import { serializeByteSequence } from 'structured-headers'
import { parseDictionary, type Members } from './dictionary.js'
import type { Algorithm } from './algorithms.js'
import type { Settings } from '../options/settings.js'

/**
 * The preferences a Want-* field states, or null when there is none. The field was judged when the
 * request arrived, unless something answered before the plugin's onRequest hook ran: one that does
 * not parse then asks for nothing.
 */
export function preferencesOf (want: string | string[] | undefined): Members | null {
  if (want === undefined) return null
  try {
    return parseDictionary(String(want))
  } catch {
    return null
  }
}

/**
 * The algorithm a response field is sent with when a request asks for it (RFC 9530 section 4):
 * among those `offered`, the one the client weighs highest, ties going to the route's own
 * preference; none when every offered key is at 0 or absent.
 */
export function chosen (settings: Settings, weights: Members, offered: (algorithm: Algorithm) => boolean):
Algorithm | null {
  let best: Algorithm | null = null
  let bestWeight = 0
  for (const [key, algorithm] of settings.algorithms) {
    const weight = weights.get(key)?.[0]
    if (typeof weight === 'number' && weight > bestWeight && offered(algorithm)) {
      best = algorithm
      bestWeight = weight
    }
  }
  return best
}

export function field (algorithm: Algorithm, digest: Buffer): string {
  return `${algorithm.key}=${serializeByteSequence(digest)}`
}

export function addVary (reply: FastifyReply, fields: string): void {
  const vary = reply.getHeader('vary')
  reply.header('vary', vary === undefined ? fields : `${String(vary)}, ${fields}`)
}

/**
 * The algorithm of Repr-Digest or Unencoded-Digest for a response: the one the client weighs
 * highest, or the route's preferred when sent unasked; in both cases one whose digest the
 * application supplied wins whenever it is acceptable, so that a stored checksum is sent rather
 * than the representation hashed again.
 */
export function representationAlgorithm (settings: Settings, want: Members | null, unasked: boolean,
  isSupplied: (algorithm: Algorithm) => boolean): Algorithm | null {
  if (want !== null) return chosen(settings, want, isSupplied) ?? chosen(settings, want, () => true)
  if (!unasked) return null
  return [...settings.algorithms.values()].find(isSupplied) ?? settings.algorithms.values().next().value as Algorithm
}
