/**
 * The fields every server of draft-ietf-httpbis-resumable-upload-15 reads (section 4.1), each a
 * Structured Field Item (RFC 9651), and the agreement of an upload's length indications. Public: an
 * application's upload resources read them as the plugin does.
 */
import type { IncomingHttpHeaders } from 'node:http'
import { parseItem } from 'structured-headers'

/** What a request says of its upload; a field absent, or not of its type, is null. */
export interface UploadFields {
  /** `Upload-Complete`: whether the upload ends with this request's content. */
  readonly complete: boolean | null
  /** `Upload-Offset`: where this request's content goes in the upload. */
  readonly offset: number | null
  /** `Upload-Length`: the length of the whole upload. */
  readonly length: number | null
}

const integer = /^[ ]*[0-9]+(?![0-9.])/

function itemOf (value: string | string[] | undefined): unknown {
  if (typeof value !== 'string') return null
  try {
    return parseItem(value)[0]
  } catch {
    return null
  }
}

/** A non-negative Integer, parameters ignored (structured-headers gives a Decimal as a number too). */
function countOf (value: string | string[] | undefined): number | null {
  const item = itemOf(value)
  return typeof item === 'number' && integer.test(String(value)) ? item : null
}

/** Upload-Complete, Upload-Offset and Upload-Length of a request (draft section 4.1). */
export function uploadFieldsOf (headers: IncomingHttpHeaders): UploadFields {
  const complete = itemOf(headers['upload-complete'])
  return {
    complete: typeof complete === 'boolean' ? complete : null,
    offset: countOf(headers['upload-offset']),
    length: countOf(headers['upload-length'])
  }
}

/** What a request tells of its upload's length, its content's included. */
export interface LengthIndications {
  /** Where the request's content starts. */
  readonly offset: number
  /** Its `Upload-Length`. */
  readonly declared: number | null
  /** Its content's length, when known: its Content-Length, or what arrived once it ended. */
  readonly content: number | null
  readonly complete: boolean
}

/**
 * The upload's length once a request's indications are taken with the one `known` before (section
 * 4.1.3: every indication must agree, and no content may go past the length), or null while none
 * is known; 'inconsistent' when they disagree.
 */
export function uploadLengthAfter (known: number | null, { offset, declared, content, complete }: LengthIndications):
number | null | 'inconsistent' {
  const lengths = [known, declared, complete && content !== null ? offset + content : null].filter((one) => one !== null)
  const length = lengths[0] ?? null
  if (lengths.some((one) => one !== length)) return 'inconsistent'
  if (length !== null && offset + (content ?? 0) > length) return 'inconsistent'
  return length
}
