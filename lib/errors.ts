/** The codes of the plugin's errors: one for each problem it answers, and one for a bad option or argument. */

/** The problem of each kind of finding, as `DigestProblem.code`. */
export const problemCodes = {
  unsupported: 'FST_DIGEST_FIELDS_UNSUPPORTED_ALGORITHM',
  invalid: 'FST_DIGEST_FIELDS_INVALID_VALUE',
  mismatched: 'FST_DIGEST_FIELDS_MISMATCHING_VALUE',
  // about:blank problems, and every problem under disclosure `none`, by status.
  400: 'FST_DIGEST_FIELDS_BAD_REQUEST',
  413: 'FST_DIGEST_FIELDS_CONTENT_TOO_LARGE',
  // An append at an offset other than the upload's, and length indications of an upload that
  // disagree (uploads/upload-fields.ts).
  409: 'FST_DIGEST_FIELDS_MISMATCHING_UPLOAD_OFFSET',
  inconsistentLength: 'FST_DIGEST_FIELDS_INCONSISTENT_UPLOAD_LENGTH'
} as const

export type ProblemCode = typeof problemCodes[keyof typeof problemCodes]

/** A TypeError for an option the plugin refuses (at registration or when a route is declared) or a bad argument. */
export function invalidOption (where: string, message: string): TypeError & { code: string } {
  const error = new TypeError(`fastify-digest-fields: ${where}: ${message}`)
  return Object.assign(error, { code: 'FST_DIGEST_FIELDS_INVALID_OPTION' })
}

/**
 * What a reader that held a request's content for `timeout` ms without taking any gets in place of
 * the rest, which the plugin then reads itself for a wait of its own (content-wait.ts).
 */
export function readerStalled (timeout: number): Error & { code: string } {
  const error = new Error(`fastify-digest-fields: the content was taken from a reader that took none of it for ${timeout} ms`)
  return Object.assign(error, { code: 'FST_DIGEST_FIELDS_READER_STALLED' })
}

/** What a reader that stopped reading gets in place of the end, once the plugin read the rest for a verdict. */
export function contentTaken (): Error & { code: string } {
  const error = new Error('fastify-digest-fields: the rest of the content was read for its verdict after its reader stopped')
  return Object.assign(error, { code: 'FST_DIGEST_FIELDS_CONTENT_TAKEN' })
}

/** Why a request whose client sent nothing for `timeout` ms, while the plugin waited for its content, was ended. */
export function clientStalled (timeout: number): Error & { code: string } {
  const error = new Error(`fastify-digest-fields: the client sent nothing for ${timeout} ms while the plugin waited for the content`)
  return Object.assign(error, { code: 'FST_DIGEST_FIELDS_CLIENT_STALLED' })
}

/** request.verifiedFiles() or digestVerdict() on a route whose content the plugin does not verify. */
export function unverifiedRoute (what: string): Error & { code: string } {
  const error = new Error(`fastify-digest-fields: ${what} on a route with config.digest: false, whose content is not verified`)
  return Object.assign(error, { code: 'FST_DIGEST_FIELDS_UNVERIFIED_ROUTE' })
}

/** A request body over the client's maxBufferedBody that it may not send without a digest (largeBody), and cannot hash. */
export function undigestedBody (limit: number): Error & { code: string } {
  const error = new Error(`fastify-digest-fields/client: the request body is over maxBufferedBody (${limit} bytes) and cannot be hashed before it is sent`)
  return Object.assign(error, { code: 'FST_DIGEST_FIELDS_BODY_NOT_DIGESTED' })
}
