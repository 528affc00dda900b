/** What a request's framing says about verifying it: its length, range, transfer codings and multipart end. */
import type { FastifyRequest } from 'fastify'
import type { Http2Stream } from 'node:http2'
import { refusals, type GeneralFinding } from '../findings.js'
import { listMembers } from '../fields/sections.js'

/**
 * What the request's framing says about its content before any of it is read: its length in bytes
 * when Content-Length gives one, 0 when the request provably has none, and NaN when only reading it
 * will tell (chunked HTTP/1.1, or HTTP/2 without Content-Length).
 */
export function declaredLength (request: FastifyRequest): number {
  // Transfer-Encoding overrides Content-Length (RFC 9112 section 6.3), as Node's parser frames them
  // with `insecureHTTPParser` (it refuses the two together otherwise).
  if (request.headers['transfer-encoding'] !== undefined) return NaN
  const length = request.headers['content-length']
  // Content-Length is 1*DIGIT (RFC 9110 section 8.6), read as the number it is: "00" is 0. Node
  // rejects other values on a real connection; inject() passes any string, which is then unknown.
  if (length !== undefined) return /^\d+$/.test(length) ? Number(length) : NaN
  // inject() (light-my-request) delivers its payload, a stream among them, whatever the fields say.
  const { stream, _lightMyRequest: injected } = request.raw as InjectedOrHttp2
  if (injected !== undefined) return injected.payload === null ? 0 : NaN
  // Without either an HTTP/1 request has no content (RFC 9112 section 6.3); HTTP/2 frames content
  // in DATA frames, and a request has none when its HEADERS frame ended the stream (RFC 9113
  // section 8.1).
  return stream === undefined || stream.endAfterHeaders ? 0 : NaN
}

/**
 * How many bytes of a request's content a connection delivers: as many as `declared` (a Content-Length
 * without Transfer-Encoding), which Node's HTTP/1 parser (RFC 9112 section 6.3) and HTTP/2 (RFC 9113
 * section 8.1.1) enforce by cutting the request short otherwise; NaN, unknown, for inject(), which
 * delivers its payload whatever it says.
 */
export function enforcedLength (request: FastifyRequest, declared: number): number {
  return '_lightMyRequest' in request.raw ? NaN : declared
}

// RFC 9110 section 14.4: range-unit SP first-pos "-" last-pos "/" ( complete-length / "*" ).
type InjectedOrHttp2 = { stream?: Http2Stream, _lightMyRequest?: { payload: unknown } }

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
  const kept = listMembers(transferEncoding).find((coding) => coding !== 'chunked')
  if (kept === undefined) return null
  return refusals.transferCoding(kept)
}

// RFC 9110 section 5.6.6: parameters, each a token name and a token or quoted-string value, with
// no white space around "=".
const tchar = "[!#$%&'*+.^_`|~0-9A-Za-z-]"
const mediaType = new RegExp(`^multipart/${tchar}+`, 'i')
const parameter = new RegExp(`[ \\t]*;[ \\t]*(${tchar}+)=(${tchar}+|"(?:[^"\\\\]|\\\\.)*")`, 'y')
// RFC 2046 section 5.1.1's bchars, which any reader takes as written: busboy decodes other bytes of a
// quoted boundary as UTF-8 and keeps a quoted-pair's backslash but for \" and \\.
const quotedBoundary = /^"[0-9A-Za-z'()+_,./:=? -]*"$/

/**
 * The close delimiter of a multipart body (RFC 2046 section 5.1.1: CRLF "--" boundary "--", the
 * CRLF taken as read before the body's first byte, as readers do), after which a multipart
 * reader's last part has ended whatever follows (an epilogue); null for other content or none
 * named. A Content-Type that a lenient reader could take another boundary from (a parameter list
 * that is not RFC 9110's, several boundaries, an RFC 2231 `boundary*`) is a finding instead, since
 * the delimiter held back must be the one the reader looks for.
 */
export function closeDelimiter (contentType: string | undefined): Buffer | GeneralFinding | null {
  const type = contentType === undefined ? null : mediaType.exec(contentType)
  if (type === null) return null
  const text = contentType as string
  const boundaries: string[] = []
  parameter.lastIndex = type[0].length
  let match: RegExpExecArray | null
  let end = parameter.lastIndex
  while ((match = parameter.exec(text)) !== null) {
    end = parameter.lastIndex
    const [, name, value] = match as unknown as [string, string, string]
    if (!/^boundary(\*|$)/i.test(name)) continue
    // An RFC 2231 `boundary*`, which a lenient reader decodes, is as unreadable as an empty one; so
    // is a quoted one of other than bchars.
    const quoted = value.startsWith('"')
    if (name.length > 'boundary'.length || (quoted && !quotedBoundary.test(value))) boundaries.push('')
    else boundaries.push(quoted ? value.slice(1, -1) : value)
  }
  // Only RFC 9110's white space may follow: String.prototype.trim() takes a no-break space too.
  if (!/^[ \t]*$/.test(text.slice(end)) || boundaries.length > 1 || boundaries[0] === '') {
    return refusals.ambiguousBoundary()
  }
  return boundaries.length === 0 ? null : Buffer.from(`\r\n--${boundaries[0] as string}--`)
}
