import type { FastifyRequest } from 'fastify'
import type { Http2Stream } from 'node:http2'
import { shortened, type GeneralFinding } from './findings.js'

/**
 * What the request's framing says about its content before any of it is read: its length in bytes
 * when Content-Length gives one, 0 when the request provably has none, and NaN when only reading it
 * will tell (chunked HTTP/1.1, or HTTP/2 without Content-Length).
 */
export function declaredLength (request: FastifyRequest): number {
  const length = request.headers['content-length']
  // Content-Length is 1*DIGIT (RFC 9110 section 8.6), read as the number it is: "00" is 0. Node
  // rejects other values on a real connection; inject() passes any string, which is then unknown.
  if (length !== undefined) return /^\d+$/.test(length) ? Number(length) : NaN
  if (request.headers['transfer-encoding'] !== undefined) return NaN
  // inject() (light-my-request) delivers its payload, a stream among them, whatever the fields say.
  const { stream, _lightMyRequest: injected } = request.raw as { stream?: Http2Stream, _lightMyRequest?: { payload: unknown } }
  if (injected !== undefined) return injected.payload === null ? 0 : NaN
  // Without either an HTTP/1 request has no content (RFC 9112 section 6.3); HTTP/2 frames content
  // in DATA frames, and a request has none when its HEADERS frame ended the stream (RFC 9113
  // section 8.1).
  return stream === undefined || stream.endAfterHeaders ? 0 : NaN
}

// RFC 9110 section 14.4: range-unit SP first-pos "-" last-pos "/" ( complete-length / "*" ).
const rangeResp = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+ (\d+)-(\d+)\/(\d+|\*)$/

/**
 * Whether Content-Range makes the request carry only part of a representation, whose Repr-Digest
 * then describes the whole and cannot be checked against these bytes (RFC 9530 section 3). Only a
 * valid range-resp does: a value that does not parse, or whose positions are out of order, is
 * ignored as RFC 9110 section 14.4 says, and the request is taken as complete.
 */
export function isPartial (contentRange: string | undefined): boolean {
  if (contentRange === undefined) return false
  const match = rangeResp.exec(contentRange)
  if (match === null) return false
  const [, first, last, complete] = match as unknown as [string, string, string, string]
  if (BigInt(last) < BigInt(first)) return false
  return complete === '*' || BigInt(complete) > BigInt(last)
}

/**
 * The finding for a transfer coding other than chunked (`Transfer-Encoding: gzip, chunked`): Node
 * removes only chunked and leaves the others on the content, while digests are of the content
 * with every transfer coding removed (RFC 9530 section 2), so it cannot be verified; or null.
 */
export function keptTransferCoding (transferEncoding: string | undefined): GeneralFinding | null {
  if (transferEncoding === undefined) return null
  const kept = transferEncoding.toLowerCase().split(',').map((coding) => coding.trim()).find((coding) => coding !== 'chunked')
  if (kept === undefined) return null
  return { kind: 'general', detail: `the content cannot be verified: this server does not remove its transfer coding ${shortened(kept)}` }
}

// RFC 2046 section 5.1.1 and RFC 7578 section 4.1: the boundary parameter, a token or a quoted string.
const boundaryParameter = /;\s*boundary\s*=\s*(?:"([^"]+)"|([^\s;"]+))/i

/**
 * The close delimiter of a multipart body (RFC 2046 section 5.1.1), after which a multipart
 * reader's last part has ended whatever follows (an epilogue), or null for other content.
 */
export function closeDelimiter (contentType: string | undefined): Buffer | null {
  if (contentType === undefined || !/^\s*multipart\//i.test(contentType)) return null
  const match = boundaryParameter.exec(contentType)
  return match === null ? null : Buffer.from(`--${match[1] ?? match[2]}--`)
}
