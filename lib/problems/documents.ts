/** The problem documents the plugin sends, in its two shapes, as applications receive and type them. */

/** A problem document of the default shape (`problemTypes: 'draft-00'`), or `about:blank`. */
export type DraftProblemDocument = {
  type: string
  title: string
  detail?: string
  'unsupported-algorithm'?: string
  algorithm?: string
  'provided-digest'?: string
  'calculated-digest'?: string
}

/** A problem document of the registered shape (`problemTypes: 'registered'`), or `about:blank`. */
export type RegisteredProblemDocument = {
  type: string
  title: string
  detail?: string
  unsupported_algorithms?: Array<{ algorithm: string, header: string }>
  invalid_digests?: Array<{ algorithm: string, header: string, reason: string }>
  mismatched_digests?: Array<{ algorithm: string, provided_digest: string, header: string }>
}

/** An RFC 9457 problem details document as this plugin sends it. */
export type DigestProblemDocument = DraftProblemDocument | RegisteredProblemDocument
