/**
 * The common case, found in a few lookups (issue 29): an HTTP/1.1 request whose Content-Length is
 * above 0, whose one digest field is a Content-Digest, or a Repr-Digest without Content-Range, of
 * one member in the form clients write, of an algorithm the route supports and a value of its
 * length; with no Transfer-Encoding or Trailer (so no trailer section), no multipart close
 * delimiter to hold back (framing.ts), nothing read of it yet, and not an upload's. judgeFields
 * and verifyRequest would find nothing to refuse and this one value to compare with the bytes
 * received (a content coding is part of the representation, RFC 9530 section 3); every other
 * request, valid or not, goes their way.
 */
import type { FastifyReply, FastifyRequest } from 'fastify'
import { canonicalBytes } from '../fields/dictionary.js'
import type { Settings } from '../options/settings.js'
import { closeDelimiter } from './framing.js'
import type { Source } from './source.js'
import type { Verification } from './verdict.js'

const positiveLength = /^[1-9]\d*$/
// One member, a key (RFC 9651 section 3.1.2) and a byte sequence, whose base64 canonicalBytes()
// checks as parseDictionary does.
const oneByteSequence = /^([a-z*][a-z0-9_.*-]*)=:[^:]*:$/

/** The verification of a request with one integrity field (digestFieldsOf), or null when it is not of the common case. */
export function commonCase (request: FastifyRequest, reply: FastifyReply, settings: Settings): Verification | null {
  const headers = request.headers
  const content = headers['content-digest']
  const text = content ?? headers['repr-digest']
  const length = headers['content-length']
  if (typeof text !== 'string' || length === undefined || !positiveLength.test(length) ||
    headers['transfer-encoding'] !== undefined || closeDelimiter(headers['content-type']) !== null ||
    (content === undefined && headers['content-range'] !== undefined)) return null
  const raw = request.raw
  if (raw.httpVersionMajor !== 1 || raw.readableDidRead || raw.readableLength > 0 ||
    (raw as unknown as Source)._readableState.ended) return null
  const key = oneByteSequence.exec(text)?.[1]
  const algorithm = key === undefined ? undefined : settings.algorithms.get(key)
  if (algorithm === undefined) return null
  const value = canonicalBytes(text, (key as string).length + 2, text.length - 1)
  if (value === null || value.length !== algorithm.length) return null
  return {
    request,
    reply,
    settings,
    expectations: [content === undefined
      ? { field: 'repr-digest', header: 'Repr-Digest', algorithm, value }
      : { field: 'content-digest', header: 'Content-Digest', algorithm, value }],
    algorithms: [algorithm],
    unencoded: null,
    // Partial content and a content coding matter only to fields this request has none of.
    partial: false,
    coded: false,
    upload: null,
    closeDelimiter: null
  }
}
