/**
 * What the plugin keeps on a reply: one object of a single shape, made on first use and held by
 * one decoration. Seven decorations of their own cost every reply of the application seven stores
 * in Fastify's constructor, which the benchmark notes count.
 */
import type { FastifyReply } from 'fastify'
import type { Algorithm } from '../fields/algorithms.js'
import type { DigestAlgorithm, ResponseDigestField } from '../types.js'
import { kReplyState } from '../symbols.js'
import type { Digests } from './payload-digests.js'

/** The representation digests the application supplied (`reply.reprDigest()`). */
export type SuppliedDigests = Readonly<Partial<Record<DigestAlgorithm, Buffer>>>

/** The file a reply serves, as staticFileDigests() marks it, with the fields it sends unasked. */
export interface ServedFile {
  readonly path: string
  readonly fields: readonly ResponseDigestField[]
}

/**
 * An Unencoded-Digest found by the route's first hook, before a coding is added: of the payload it
 * handed on, which had `codings`, with `status`.
 */
export interface Unencoded {
  readonly algorithm: Algorithm
  readonly digests: Digests
  readonly handedOn: unknown
  readonly codings: readonly string[]
  readonly status: number
}

/** The send on its way (Fastify's callback for its onSend hooks), and what the last hook handed on. */
export interface ResponseSend { readonly done: unknown, handedOn: unknown, failed: boolean }

/** A reply's status and fields as a send left them, and over HTTP/1.1 which framing fields Node was told were removed. */
export interface SentAs {
  readonly status: number
  readonly message: string | null
  readonly headers: Record<string, unknown>
  readonly removed: { readonly _removedTE: boolean, readonly _removedContLen: boolean, readonly _removedConnection: boolean } | null
}

/** A success send held for the request's verdict, as it was sent, and whether a later send was logged. */
export interface HeldSend {
  readonly payload: unknown
  readonly as: SentAs
  laterLogged: boolean
}

/** The fields a pass of the response hook placed, to take back if the hooks run again for an error. */
export interface SentDigests { readonly headers: string[], readonly trailers: string[] }

export class ReplyState {
  supplied: SuppliedDigests | null = null
  /** Set by staticFileDigests() for a file @fastify/static serves. */
  servedFile: ServedFile | null = null
  unencoded: Unencoded | null = null
  /** The payload as the route's first onSend hook saw it. */
  firstPayload: unknown = null
  /** The send the route's response hooks are on. */
  send: ResponseSend | null = null
  /** Fastify's callback for a send that an answer of 400 or above, or to an error, replaced while it waited. */
  replaced: unknown = null
  /** The reply's first success send, held for the request's verdict. */
  held: HeldSend | null = null
  /** What the last pass through the response hook placed. */
  sent: SentDigests | null = null
}

type StateReply = FastifyReply & { [kReplyState]?: ReplyState | null }

/** The plugin's state on `reply`, made on first use. */
export function replyState (reply: FastifyReply): ReplyState {
  return ((reply as StateReply)[kReplyState] ??= new ReplyState())
}
