/**
 * The common case, found in a few lookups and verified in one small object (issue 29): an HTTP/1.1
 * request whose Content-Length is above 0, whose one digest field is a Content-Digest, or a
 * Repr-Digest without Content-Range, of one member in the form clients write, of an algorithm the
 * route supports and a value of its length; with no Transfer-Encoding or Trailer (so no trailer
 * section), no multipart close delimiter to hold back (framing.ts), nothing read of it yet, and not
 * an upload's. judgeFields and verifyRequest would find nothing to refuse and this one value to
 * compare with the bytes received (a content coding is part of the representation, RFC 9530
 * section 3); every other request, valid or not, goes their way.
 */
import { timingSafeEqual } from 'node:crypto'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { canonicalBytes } from '../fields/dictionary.js'
import { HeldContent } from '../fields/held-content.js'
import type { Settings } from '../options/settings.js'
import { answerUnheard } from '../problems/answer.js'
import { problemFor } from '../problems/problems.js'
import { ContentHashes } from './content-hashes.js'
import { closeDelimiter, enforcedLength } from './framing.js'
import type { Expectation } from './judge-fields.js'
import { PendingContent } from './pending-content.js'
import { giveBackPush, takeOverPush, type Source } from './source.js'
import { verifiedAs } from './verdict.js'

const positiveLength = /^[1-9]\d*$/
// One member, a key (RFC 9651 section 3.1.2) and a byte sequence, whose base64 canonicalBytes()
// checks as parseDictionary does.
const oneByteSequence = /^([a-z*][a-z0-9_.*-]*)=:[^:]*:$/
const nothing = Buffer.alloc(0)

/** The one value a request with one integrity field (digestFieldsOf) is checked against, or null when it is not of the common case. */
export function commonCase (request: FastifyRequest, settings: Settings): Expectation | null {
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
  return content === undefined
    ? { field: 'repr-digest', header: 'Repr-Digest', algorithm, value }
    : { field: 'content-digest', header: 'Content-Digest', algorithm, value }
}

/**
 * The SourceVerifier of the common case: each chunk hashed before any reader has it, the last
 * kilobyte and the end held back until the one value compares equal, the stream failed otherwise.
 */
export class CommonCaseVerifier extends PendingContent {
  // TypeScript-private, not #private: made for every request with a digest (docs/development.md).
  readonly covered = true
  private readonly request: FastifyRequest
  private readonly reply: FastifyReply
  private readonly settings: Settings
  private readonly expected: Expectation
  private readonly push: (chunk: Buffer | null) => boolean
  private readonly held: HeldContent
  private readonly hashes: ContentHashes

  constructor (request: FastifyRequest, reply: FastifyReply, settings: Settings, expected: Expectation) {
    super(request.raw as unknown as Source)
    this.request = request
    this.reply = reply
    this.settings = settings
    this.expected = expected
    this.hashes = new ContentHashes([expected.algorithm], null, null)
    this.held = new HeldContent(null, enforcedLength(request, Number(request.headers['content-length'])))
    this.push = request.raw.push
    takeOverPush(this.source, this)
  }

  protected stallTimeout (): number {
    return this.settings.stallTimeout
  }

  detach (): void {
    giveBackPush(this.source, this.push)
  }

  receive (chunk: Buffer | string | null): boolean {
    // Node's HTTP/1 parser pushes no end for a request whose client left: an end is its content's.
    if (chunk === null) {
      this.conclude()
      return false
    }
    // light-my-request pushes a string payload as it was given.
    const bytes = typeof chunk === 'string' ? Buffer.from(chunk) : chunk
    this.arrived()
    if (this.held.releasable > 0) this.hashes.hash(bytes)
    else this.hashes.add(bytes)
    return this.held.take(bytes, this.push, this.source) ?? this.push.call(this.source, nothing)
  }

  private conclude (): void {
    this.detach()
    const { field, header, algorithm, value } = this.expected
    const digest = this.hashes.firstDigest()
    // Equal lengths are checked by commonCase(); timingSafeEqual reads every byte (verdict.ts).
    if (timingSafeEqual(digest, value)) {
      // Set, not an object literal with a computed key, which V8 defines through its runtime each time.
      const values: Record<string, Buffer> = {}
      values[algorithm.key] = digest
      verifiedAs(this.request, { fields: [field], values, unencoded: {} })
      this.concludeVerified(this.held.release(), this.push)
      return
    }
    const problem = problemFor(this.settings,
      [{ kind: 'mismatched', algorithm: algorithm.key, header, provided: value, calculated: digest }])
    this.concludeFailed(problem, (heard) => answerUnheard(problem, heard, this.request, this.reply))
  }
}
