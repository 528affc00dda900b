/** Want-* preferences (RFC 9530 section 4): read, written, and the algorithm they choose. */
import { serializeDictionary, type Item } from 'structured-headers'
import { parseDictionary, type Members } from './dictionary.js'
import type { Algorithm } from './algorithms.js'

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
 * preference (`algorithms`, most preferred first); none when every offered key is at 0 or absent.
 */
export function chosen (algorithms: ReadonlyMap<string, Algorithm>, weights: Members,
  offered: (algorithm: Algorithm) => boolean): Algorithm | null {
  let best: Algorithm | null = null
  let bestWeight = 0
  for (const [key, algorithm] of algorithms) {
    const weight = weights.get(key)?.[0]
    if (typeof weight === 'number' && weight > bestWeight && offered(algorithm)) {
      best = algorithm
      bestWeight = weight
    }
  }
  return best
}

/** A `Want-*` field: each key with its preference, as a structured-field dictionary (RFC 9530 section 4). */
export function serializePreferences (preferences: ReadonlyMap<string, number>): string {
  const dictionary = new Map<string, Item>()
  for (const [key, weight] of preferences) dictionary.set(key, [weight, new Map()])
  return serializeDictionary(dictionary)
}
