/** The public type contract: lib/ implements it, types/index.test-d.ts pins it; nothing loads at run time. */
import type { LogLevel } from 'fastify'

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

/**
 * The shape of problem documents.
 * - `draft-00`: the three singular types of the specification (`digest-unsupported-algorithm`,
 *   `digest-invalid-value`, `digest-mismatching-value`), reporting the first problem found.
 * - `registered`: the three plural types registered with IANA (`digest-unsupported-algorithms`,
 *   `digest-invalid-values`, `digest-mismatched-values`), listing every problem of the kind found,
 *   each with the field that carried it, and never a calculated digest.
 */
export type DigestProblemTypes = 'draft-00' | 'registered'

/** A digest field the plugin can send on responses. */
export type ResponseDigestField = 'content-digest' | 'repr-digest' | 'unencoded-digest'

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
  /** Default `'draft-00'`. */
  problemTypes?: DigestProblemTypes
  /**
   * The level of the log line each problem gets, which names its type, fields and algorithms
   * (never a digest value), whatever the response discloses. Default `'info'`.
   */
  problemLogLevel?: LogLevel
  /**
   * Digest fields sent on every successful response, with the route's most preferred algorithm,
   * whether or not the request asked (`Want-Content-Digest`, `Want-Repr-Digest` are always
   * answered). Default `[]`.
   */
  responseDigests?: readonly ResponseDigestField[]
  /**
   * Sign responses for signature-based SRI (`integrity="ed25519-<key>"`): every success response
   * sends `Unencoded-Digest`, and one that carries it in the header section gets an RFC 9421
   * signature over it with `tag="ed25519-integrity"`. `false` turns a plugin-level key off.
   */
  integritySignatures?: IntegritySignatures | false
  /**
   * How long, in milliseconds, a wait of the plugin's for the rest of the content (a success reply
   * held for its verdict, `digestVerdict()`, `commit()`) lets it stand still: then a reader that
   * holds it is cut off with an error and the plugin reads the rest, or, when the client sends
   * nothing, the request is ended and its connection closed. Default 10,000.
   */
  stallTimeout?: number
}

/** What only a route can set under `config.digest`. */
export interface DigestRouteConfig extends DigestRouteOptions {
  /**
   * The route creates resumable uploads or appends to them (draft-ietf-httpbis-resumable-upload):
   * the creation's Repr-Digest covers every append together, and is compared when the upload
   * completes. See docs/resumable-uploads.md.
   */
  resumable?: ResumableUploadOptions
}

/**
 * What a route does with resumable uploads: it creates them (`creation: true`), or it is an upload
 * resource, which takes appends (`loadState`), never both.
 */
export type ResumableUploadOptions =
  | {
    /** A request with `Upload-Complete` creates an upload here. */
    creation: true
    loadState?: never
  }
  | {
    creation?: false
    /**
     * Appends (`Content-Type: application/partial-upload`) are taken here: the state stored with
     * the upload (what `request.resumableUpload.state()` gave for its last request), or null when
     * the upload is not known, which leaves the append to the application. Called before the
     * append's content is read; an error it throws is answered by Fastify.
     */
    loadState: (request: import('fastify').FastifyRequest) => string | null | undefined |
    Promise<string | null | undefined>
  }

/** `request.resumableUpload`: an upload creation or append on a resumable route. */
export interface ResumableUpload {
  /** The request creates the upload (else it appends to one). */
  readonly creation: boolean
  /** `Upload-Complete: ?1`: the upload ends with this request's content. */
  readonly complete: boolean
  /** The offset this request's content starts at: 0 for a creation, the agreed `Upload-Offset` of an append. */
  readonly offset: number
  /**
   * The upload's length (draft section 4.1.3): declared by `Upload-Length` on this request or an
   * earlier one, or, once this request's content completed the upload, its size; null while unknown.
   */
  readonly length: number | null
  /** The whole upload's digest did not match when this request completed it: keep nothing of it. */
  readonly failed: boolean
  /**
   * The running digest's state to store with the upload, a few hundred bytes of JSON: once the
   * content is verified and kept (`contentKept`, default true) it covers it; else it is the state
   * the request started from, with the length the request made known.
   */
  state (options?: { contentKept?: boolean }): string
  /**
   * The state up to `offset`, for an application that keeps the bytes of a request cut short up to
   * there; null when the request carries a digest of its own content (`Content-Digest`,
   * `Unencoded-Digest`), the upload failed, or `offset` is not the end of one of the last 64 chunks
   * its readers were given.
   * Never a completed upload's: that is `state()`, stored with the answer that completes it.
   */
  stateAt (offset: number): string | null
  /** The digests of the whole upload so far, once this request's content is verified; else empty. */
  digests (): Readonly<Partial<Record<DigestAlgorithm, Buffer>>>
}

/** The key that signs Unencoded-Digest for signature-based SRI. */
export interface IntegritySignatures {
  /** An Ed25519 private key, as a `KeyObject` or PEM; the `keyid` is the base64 of its raw public key. */
  privateKey: import('node:crypto').KeyObject | string | Buffer
}

/** How the digests of served files are kept. */
export interface FileDigestsOptions {
  /** Files up to this many bytes are hashed before their first response; larger ones as it is sent. Default 4 MiB. */
  hashBeforeSending?: number
  /** Versions of files whose digests are kept, least recently used dropped first. Default 10,000. */
  maxEntries?: number
}

/** Options of `staticFileDigests()`. */
export interface StaticFileDigestsOptions {
  /** The fields every served file sends unasked. Default all three. */
  responseDigests?: readonly ResponseDigestField[]
  /** @fastify/static's own `setHeaders`, called after the file is marked. */
  setHeaders?: (reply: import('fastify').FastifyReply, path: string, stat: import('node:fs').Stats) => void
}

export interface FastifyDigestFieldsOptions extends DigestRouteOptions {
  /**
   * Base address of the problem types registry; type URIs are `<base>#<name>`.
   * Default `https://iana.org/assignments/http-problem-types`.
   */
  problemTypesBase?: string
  /** The file digest cache, which lets files carry their digests in the header section. */
  fileDigests?: FileDigestsOptions
}

/** The integrity field names, as Node spells request header names. */
export type DigestFieldName = 'content-digest' | 'repr-digest' | 'unencoded-digest'

/** `request.verifiedFiles()`: files committed only once the whole request verified. */
export interface VerifiedFiles {
  /**
   * Writes `content` to a temporary file beside `destination`; resolves once written, with its size
   * and digest, and removes it on failure.
   */
  save (content: import('node:stream').Readable, destination: string): Promise<SavedFile>
  /**
   * Waits for the verdict, then renames every saved file to its destination and resolves with
   * what was verified and the files; on a failure removes them and rejects with the problem,
   * which Fastify answers when the handler lets it through.
   */
  commit (): Promise<CommittedFiles>
  /** Removes the saved files; the plugin does it before any answer is sent, unless they were committed. */
  discard (): Promise<void>
}

/**
 * A file `request.verifiedFiles().save()` wrote, with its digest by the route's most preferred
 * algorithm, taken from the bytes as they were written (sha-256 on a route declared before the plugin).
 */
export interface SavedFile {
  readonly destination: string
  /** Its size in bytes. */
  readonly size: number
  readonly algorithm: DigestAlgorithm
  readonly digest: Buffer
}

/** What `request.verifiedFiles().commit()` resolves with. */
export interface CommittedFiles {
  /** What the request's content was verified against (`request.digest`), or null when it carried no integrity field. */
  readonly digest: VerifiedDigest | null
  /** The files moved into place, in the order they were saved. */
  readonly files: readonly SavedFile[]
}

/** What the plugin verified about the request content, on `request.digest`. */
export interface VerifiedDigest {
  /** The integrity fields whose values were checked, from the header or the trailer section. */
  readonly fields: readonly DigestFieldName[]
  /**
   * The digest of the bytes received (`Content-Digest`, `Repr-Digest`) for every algorithm
   * checked, equal to the values the client sent.
   */
  readonly values: Readonly<Partial<Record<DigestAlgorithm, Buffer>>>
  /** The digest of the content with every content coding removed, when `Unencoded-Digest` was checked. */
  readonly unencoded: Readonly<Partial<Record<DigestAlgorithm, Buffer>>>
}

declare module 'fastify' {
  interface FastifyContextConfig {
    /** Per-route settings of fastify-digest-fields; `false` switches the plugin off for the route. */
    digest?: DigestRouteConfig | false
  }
  interface FastifyRequest {
    /** Set once the content has been verified against its integrity fields; `null` otherwise. */
    digest: VerifiedDigest | null
    /**
     * Reads the content to its end (discarding what no reader takes) and resolves with what was
     * verified, or null when it carried no integrity field; rejects with the `DigestProblem` of a
     * failure, or the error of an aborted request.
     */
    digestVerdict (): Promise<VerifiedDigest | null>
    /** Saves files beside their destinations and moves them into place only once the request verified. */
    verifiedFiles (): VerifiedFiles
    /** The upload a request creates or appends to, on a route with `config.digest.resumable`; else null. */
    resumableUpload: ResumableUpload | null
  }
  interface FastifyReply {
    /**
     * Representation digests the application already knows (the checksum stored with an upload),
     * sent as `Repr-Digest` instead of hashing the representation, whenever the client accepts
     * their algorithm. Each value must be a digest of its algorithm's length.
     */
    reprDigest (digests: Readonly<Partial<Record<DigestAlgorithm, Buffer>>>): FastifyReply
  }
}
