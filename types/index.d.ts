// The public type contract of fastify-digest-fields. lib/ implements it; index.test-d.ts pins it.
import 'fastify'

/** Algorithm keys of the IANA "Hash Algorithms for HTTP Digest Fields" registry this plugin can compute. */
export type DigestAlgorithm = 'sha-256' | 'sha-512' | 'md5' | 'sha'

/**
 * Supported algorithms, most preferred first, or a map of algorithm key to the preference
 * weight (1 to 10) advertised in `Want-Content-Digest` and `Want-Repr-Digest`.
 * The deprecated keys `md5` and `sha` are only supported when listed here explicitly.
 */
export type DigestAlgorithms = readonly DigestAlgorithm[] | Readonly<Partial<Record<DigestAlgorithm, number>>>

/**
 * How much a problem response tells the client.
 * - `full`: the three specific problem types with every member (RFC 9457 document as specified).
 * - `no-calculated-digest`: as `full`, but `digest-mismatching-value` leaves out `calculated-digest`.
 * - `none`: every failure is the same `about:blank` 400 problem, with no detail and no `Want-*` field.
 */
export type DigestDisclosure = 'full' | 'no-calculated-digest' | 'none'

/** Settings a route can override under `config.digest`. */
export interface DigestRouteOptions {
  /** Default `['sha-256', 'sha-512']`. */
  algorithms?: DigestAlgorithms
  /** Reject every unsupported algorithm key, not only fields that name no supported one. Default `false`. */
  strictAlgorithms?: boolean
  /** A request with content must carry a verifiable `Content-Digest` or `Repr-Digest`. Default `false`. */
  required?: boolean
  /** Default `'full'`. */
  disclosure?: DigestDisclosure
}

export interface FastifyDigestFieldsOptions extends DigestRouteOptions {
  /** Base address of the problem types registry; type URIs are `<base>#<name>`. Default `https://iana.org/assignments/http-problem-types`. */
  problemTypesBase?: string
}

/** The integrity field names, as Node spells request header names. */
export type DigestFieldName = 'content-digest' | 'repr-digest'

/** What the plugin verified about the request content, on `request.digest`. */
export interface VerifiedDigest {
  /** The integrity fields whose values were checked against the received bytes. */
  readonly fields: readonly DigestFieldName[]
  /** The digest of the received bytes for every algorithm checked (equal to the values the client sent). */
  readonly values: Readonly<Partial<Record<DigestAlgorithm, Buffer>>>
}

/** An RFC 9457 problem details document as this plugin sends it. */
export type DigestProblemDocument = {
  type: string
  title: string
  detail?: string
  'unsupported-algorithm'?: string
  algorithm?: string
  'provided-digest'?: string
  'calculated-digest'?: string
}

declare module 'fastify' {
  interface FastifyContextConfig {
    /** Per-route settings of fastify-digest-fields; `false` switches the plugin off for the route. */
    digest?: DigestRouteOptions | false
  }
  interface FastifyRequest {
    /** Set once the content has been verified against its integrity fields; `null` otherwise. */
    digest: VerifiedDigest | null
  }
}
