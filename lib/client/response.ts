/** A response's digests, checked while its body streams: from the header section, then the trailer section. */
import { timingSafeEqual, type Hash } from 'node:crypto'
import { parseDictionary } from '../fields/dictionary.js'
import { distinct, type Algorithm } from '../fields/algorithms.js'
import { integrityFields, type Section } from '../fields/sections.js'
import { DigestMismatchError, DigestUnverifiableError, type ResponseDigestField } from './errors.js'
import { contentCodings, UnencodedHasher } from '../fields/unencoded.js'

type Field = ResponseDigestField

/** One value a response carried, for an algorithm the client computes. */
interface Expected { readonly field: ResponseDigestField, readonly algorithm: Algorithm, readonly value: Buffer }

/** What the client computes and how strict it is, normalized once by the interceptor. */
export interface CheckSettings {
  readonly algorithms: ReadonlyMap<string, Algorithm>
  readonly requireVerifiable: boolean
  /** The most bytes a coded body is decoded to for its Unencoded-Digest. */
  readonly maxDecodedBody: number
}

/** The algorithms a request's Want-* field asked for, by field; a field it did not name asks for every one. */
export type Asked = Partial<Record<ResponseDigestField, readonly Algorithm[]>>

function valueOf (section: Section, field: string): string | undefined {
  const value = section[field]
  return Array.isArray(value) ? value.join(', ') : value
}

/**
 * The values of `fields` in a section that this client can check. A field that does not parse, an
 * unknown key or a value of the wrong length is left out (RFC 9530 lets a recipient ignore it), and
 * said in `ignored`.
 */
function expectedIn (section: Section, fields: readonly Field[], settings: CheckSettings, ignored: string[]):
Expected[] {
  const expected: Expected[] = []
  for (const field of fields) {
    const text = valueOf(section, field)
    if (text === undefined) continue
    let dictionary
    try {
      dictionary = parseDictionary(text)
    } catch {
      ignored.push(`${field} does not parse`)
      continue
    }
    for (const [key, [value]] of dictionary) {
      const algorithm = settings.algorithms.get(key)
      if (algorithm === undefined) continue
      if (!Buffer.isBuffer(value) || value.length !== algorithm.length) {
        ignored.push(`${field} ${key} is not a digest of its algorithm`)
        continue
      }
      // A copy: the parsed value is a view of Node's shared pool, and errors hand it to the application.
      expected.push({ field, algorithm, value: Buffer.from(value) })
    }
  }
  return expected
}

/** A digest of the response that matched its body. */
export interface Checked {
  readonly field: ResponseDigestField
  readonly algorithm: string
}

/**
 * The check of a response, or null when it has no content to check: a HEAD response, 204 or 304.
 * Repr-Digest and Unencoded-Digest describe the whole representation, which a 206 is part of.
 */
export function responseCheck (
  method: string, statusCode: number, headers: Section, settings: CheckSettings, asked: Asked
): ResponseCheck | null {
  if (method === 'HEAD' || statusCode === 204 || statusCode === 304 || statusCode < 200) return null
  const partial = statusCode === 206 || headers['content-range'] !== undefined
  return new ResponseCheck(headers, partial ? ['content-digest'] : integrityFields, settings, asked)
}

/**
 * Hashes a response body as it passes and compares it, at its end, with every value of its
 * integrity fields the client can check. The end waits for the verdict; the caller hands the
 * consumer an error in its place on a mismatch.
 */
export class ResponseCheck {
  readonly #settings: CheckSettings
  readonly #fields: readonly ResponseDigestField[]
  readonly #expected: Expected[]
  readonly #ignored: string[]
  readonly #received: Map<Algorithm, Hash>
  readonly #unencoded: UnencodedHasher | null
  readonly #unencodedFailure: string | null

  constructor (headers: Section, fields: readonly ResponseDigestField[], settings: CheckSettings, asked: Asked) {
    this.#settings = settings
    this.#fields = fields
    this.#ignored = []
    this.#expected = expectedIn(headers, fields, settings, this.#ignored)
    // A field announced for the trailer section names its algorithms only at the end (RFC 9110
    // section 6.6.2): the body is hashed with what the request asked for, or every algorithm.
    // Fastify 5 separates the names with spaces, not commas (RFC 9110 section 6.6.2): both are read.
    const announced = new Set((valueOf(headers, 'trailer') ?? '').toLowerCase().split(/[\s,]+/))
    const all = [...settings.algorithms.values()]
    const wanted = (field: ResponseDigestField): Algorithm[] => distinct([
      ...this.#expected.filter((expected) => expected.field === field).map(({ algorithm }) => algorithm),
      ...(announced.has(field) ? asked[field] ?? all : [])
    ])
    const codings = contentCodings(valueOf(headers, 'content-encoding'))
    const coded = !Array.isArray(codings) || codings.length > 0
    const unencoded = wanted('unencoded-digest')
    const onReceived = [...wanted('content-digest'), ...wanted('repr-digest'), ...(coded ? [] : unencoded)]
    this.#received = new Map(distinct(onReceived).map((algorithm) => [algorithm, algorithm.createHash()]))
    this.#unencodedFailure = Array.isArray(codings) ? null : codings.detail
    this.#unencoded = coded && Array.isArray(codings) && unencoded.length > 0
      ? new UnencodedHasher(codings, unencoded, settings.maxDecodedBody)
      : null
  }

  /** Hashes a chunk before the consumer has it; false when the side decoder's input is full. */
  update (chunk: Buffer): boolean {
    for (const hash of this.#received.values()) hash.update(chunk)
    return this.#unencoded === null || this.#unencoded.write(chunk)
  }

  /** Calls back once the side decoder, whose input `update` said was full, takes input again. */
  whenDrained (callback: () => void): void {
    (this.#unencoded as UnencodedHasher).whenDrained(callback)
  }

  /** Gives up on a body that ended in an error: the side decoder is ended and let go. */
  abandon (): void {
    this.#unencoded?.end(() => {})
  }

  /** Compares at the end of the body, with the trailer section's fields too; `callback` gets the failure, if any. */
  end (trailers: Section, callback: (error: Error | null, checked: readonly Checked[]) => void): void {
    const expected = [...this.#expected, ...expectedIn(trailers, this.#fields, this.#settings, this.#ignored)]
    const received = new Map([...this.#received].map(([algorithm, hash]) => [algorithm, hash.digest()]))
    const decide = (decoded: ReadonlyMap<Algorithm, Buffer> | null, decodeFailure: string | null): void => {
      if (decodeFailure !== null) this.#ignored.unshift(decodeFailure)
      const checked: Checked[] = []
      for (const { field, algorithm, value } of expected) {
        const coded = field === 'unencoded-digest' && (this.#unencoded !== null || this.#unencodedFailure !== null)
        const digest = coded ? decoded?.get(algorithm) : received.get(algorithm)
        if (digest === undefined) {
          this.#ignored.push(`${field} ${algorithm.key} was not computed`)
          continue
        }
        if (!timingSafeEqual(digest, value)) {
          callback(new DigestMismatchError(field, algorithm.key, value, digest), checked)
          return
        }
        checked.push({ field, algorithm: algorithm.key })
      }
      if (checked.length === 0 && this.#settings.requireVerifiable) {
        callback(new DigestUnverifiableError(this.#ignored[0] ?? 'it has no digest field this client checks'), checked)
        return
      }
      callback(null, checked)
    }
    if (this.#unencoded === null) {
      decide(null, this.#unencodedFailure)
      return
    }
    this.#unencoded.end((result) => {
      if (result instanceof Map) {
        decide(result, null)
        return
      }
      // Content that does not decode (bytes after its end, a truncated or corrupt stream) is not
      // what its Unencoded-Digest describes: refused whatever `unverifiable` says, or changing
      // one byte of a coded body would turn the check off. Content that decodes past the bound
      // (413) is not checked, like a field of an algorithm the client does not compute.
      const claimed = expected.some(({ field }) => field === 'unencoded-digest')
      if (claimed && result.status !== 413) callback(new DigestUnverifiableError(result.detail), [])
      else decide(null, result.detail)
    })
  }
}
