/** What a response's digests cover: the representation, the content sent, or the file it serves. */
import type { FastifyReply, FastifyRequest } from 'fastify'
import { ReadStream } from 'node:fs'
import type { FileRef } from './file-digests.js'
import { contentCodings } from '../fields/unencoded.js'
import { replyState } from './reply-state.js'

export interface Coverage { content: boolean, repr: 'payload' | 'supplied' | 'none' }

/**
 * What a response carries (RFC 9530 sections 2 and 3): Content-Digest covers the content sent,
 * Repr-Digest and Unencoded-Digest the whole selected representation. For a full 2xx response
 * they are the same bytes; for HEAD there is no content, and the representation is the payload a
 * GET would send; for a 206 the part is not the representation, and for a 304 there is none here,
 * so the representation's digests come only from the application or the file; a 204 has no
 * representation data, whose digest is that of empty content.
 */
export function coverage (request: FastifyRequest, status: number): Coverage {
  if (status === 304) return { content: false, repr: 'supplied' }
  // Fastify drops a 204's payload, whatever it was: the digests are those of empty content.
  if (status === 204) return { content: true, repr: 'payload' }
  if (status < 200 || status >= 300) return { content: false, repr: 'none' }
  if (status === 206) return { content: true, repr: 'supplied' }
  return { content: request.method !== 'HEAD', repr: 'payload' }
}

/** The content codings of a response, or null for one the plugin cannot remove. */
export function codingsOfReply (reply: FastifyReply): string[] | null {
  const encoding = reply.getHeader('content-encoding')
  const codings = contentCodings(encoding === undefined ? undefined : String(encoding))
  return Array.isArray(codings) ? codings : null
}

/**
 * The file a response serves, as the route's first onSend hook saw it, and only while no later
 * hook (@fastify/compress) has replaced the payload: a stream reading one, or, for a HEAD or 304
 * answer that sends none, the file staticFileDigests() marked.
 */
export function fileOf (reply: FastifyReply, payload: unknown): FileRef | null {
  const { firstPayload, servedFile: served } = replyState(reply)
  if (firstPayload !== payload) return null
  // A stream sends the file's bytes only as it has not yet read, buffered or decoded any of them.
  if (payload instanceof ReadStream && typeof payload.path === 'string' && payload.readableEncoding === null &&
    !payload.readableDidRead && payload.readableLength === 0) return { path: payload.path, stream: payload }
  const sendsNone = reply.request.method === 'HEAD' || reply.statusCode === 304
  return served !== null && sendsNone ? { path: served.path } : null
}
