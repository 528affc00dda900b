/** A response's digest fields: a member written, the algorithm a representation's is sent with, and Vary. */
import type { FastifyReply } from 'fastify'
import { serializeByteSequence } from 'structured-headers'
import type { Algorithm } from '../fields/algorithms.js'
import type { Members } from '../fields/dictionary.js'
import { chosen } from '../fields/preferences.js'
import type { Settings } from '../options/settings.js'

export function field (algorithm: Algorithm, digest: Buffer): string {
  return `${algorithm.key}=${serializeByteSequence(digest)}`
}

/** Adds the fields Vary does not list yet: a reply sent again (for an error) varies on the same. */
export function addVary (reply: FastifyReply, fields: readonly string[]): void {
  const vary = reply.getHeader('vary')
  const listed = vary === undefined ? [] : String(vary).toLowerCase().split(/\s*,\s*/)
  const added = fields.filter((name) => !listed.includes(name.toLowerCase()))
  if (added.length > 0) reply.header('vary', [...(vary === undefined ? [] : [String(vary)]), ...added].join(', '))
}

/**
 * The algorithm of Repr-Digest or Unencoded-Digest for a response: the one the client weighs
 * highest, or the route's preferred when sent unasked; in both cases one whose digest the
 * application supplied wins whenever it is acceptable, so that a stored checksum is sent rather
 * than the representation hashed again.
 */
export function representationAlgorithm (settings: Settings, want: Members | null, unasked: boolean,
  isSupplied: (algorithm: Algorithm) => boolean): Algorithm | null {
  if (want !== null) return chosen(settings.algorithms, want, isSupplied) ?? chosen(settings.algorithms, want, () => true)
  if (!unasked) return null
  return [...settings.algorithms.values()].find(isSupplied) ?? settings.algorithms.values().next().value as Algorithm
}
