/**
 * fastify-digest-fields/client: the other end, an undici interceptor. Where a request goes:
 *   dispatch         options normalized once (digestInterceptor); the content's bytes known or read
 *                    once (client-request.ts); Content-Digest and Want-* fields added
 *   response start   a digest problem held for a retry, any other response checked (client-handler.ts)
 *   as it arrives    each chunk hashed before the consumer has it (client-response.ts)
 *   response end     digests compared, with the trailer section's; a mismatch errors in place of the end
 */
import type { Dispatcher } from 'undici'
import { lookupAlgorithm, type Algorithm } from './fields/algorithms.js'
import { DigestHandler, type ClientSettings, type DigestRetry } from './client/handler.js'
import { currentHandler } from './client/legacy-handler.js'
import { Relay } from './client/relay.js'
import { fieldsOf, knownContent, readContent, type Content, type FieldMap, type LargeBody } from './client/request.js'
import { PreferredAlgorithms } from './client/preferred.js'
import { invalidOption } from './errors.js'
import { serializePreferences } from './fields/preferences.js'

export { DigestMismatchError, DigestProblemError, DigestUnverifiableError } from './client/errors.js'
export type { DigestProblemKind, ResponseDigestField } from './client/errors.js'
export type { DigestRetry } from './client/handler.js'

/** The options of `digestInterceptor`. */
export interface DigestInterceptorOptions {
  /** Most preferred first: the first digests requests, any is checked on responses. Default sha-256, sha-512. */
  algorithms?: ReadonlyArray<'sha-256' | 'sha-512'>
  /** The field added to requests whose content is known. Default `'content-digest'`; `false` adds none. */
  requestDigest?: 'content-digest' | 'repr-digest' | false
  /** The Want-* fields every request carries, asking for digests on responses. Default none. */
  want?: ReadonlyArray<'content-digest' | 'repr-digest' | 'unencoded-digest'>
  /** A response with no digest this client can check: `'ignore'` it (default, RFC 9530 allows), or `'require'` one. */
  unverifiable?: 'ignore' | 'require'
  /** Retries after a digest problem, per request. Default 1; 0 never retries. */
  maxRetries?: number
  /** Told of each retry before it is sent; a promise it returns is waited for, and a rejection fails the request. */
  onRetry?: (retry: DigestRetry) => void | Promise<void>
  /** The most bytes of a streamed body (fetch sends every body as one) read into memory to digest it. Default 1 MiB. */
  maxBufferedBody?: number
  /**
   * A body past maxBufferedBody: `'send'` it without a digest (default), `'refuse'` it, or
   * `'hash-first'` one that can be read twice (a file stream not read yet is hashed from its file,
   * at any size) and refuse any other. A refused request fails with FST_DIGEST_FIELDS_BODY_NOT_DIGESTED.
   */
  largeBody?: LargeBody
  /**
   * The most bytes a coded response body is decoded to, at any stage, to check its
   * Unencoded-Digest; past it the field is not checked, as one the client cannot compute. Default 16 MiB.
   */
  maxDecodedBody?: number
}

type Body = NonNullable<Dispatcher.DispatchOptions['body']> | null

function check (condition: boolean, option: string, expected: string): void {
  if (!condition) throw invalidOption(`digestInterceptor: ${option}`, `expected ${expected}`)
}

const optionNames = [
  'algorithms', 'requestDigest', 'want', 'unverifiable', 'maxRetries', 'onRetry', 'maxBufferedBody', 'largeBody', 'maxDecodedBody'
]

function clientSettings (options: DigestInterceptorOptions): ClientSettings {
  check(typeof options === 'object' && options !== null, 'options', 'an object')
  for (const key of Object.keys(options)) check(optionNames.includes(key), key, `one of ${optionNames.join(', ')}`)
  const {
    algorithms = ['sha-256', 'sha-512'],
    requestDigest = 'content-digest',
    want = [],
    unverifiable = 'ignore',
    maxRetries = 1,
    onRetry = null,
    maxBufferedBody = 1024 * 1024,
    largeBody = 'send',
    // A small compressed body can decode to gigabytes: the check of one is bounded.
    maxDecodedBody = 16 * 1024 * 1024
  } = options
  const known = (values: unknown, names: readonly string[]): boolean =>
    Array.isArray(values) && values.every((value) => names.includes(value))
  check(known(algorithms, ['sha-256', 'sha-512']) && algorithms.length > 0,
    'algorithms', "a non-empty array of 'sha-256' and 'sha-512'")
  check(requestDigest === 'content-digest' || requestDigest === 'repr-digest' || requestDigest === false,
    'requestDigest', "'content-digest', 'repr-digest' or false")
  check(known(want, ['content-digest', 'repr-digest', 'unencoded-digest']),
    'want', "an array of 'content-digest', 'repr-digest' and 'unencoded-digest'")
  check(unverifiable === 'ignore' || unverifiable === 'require', 'unverifiable', "'ignore' or 'require'")
  check(Number.isInteger(maxRetries) && maxRetries >= 0 && maxRetries <= 10, 'maxRetries', 'an integer from 0 to 10')
  check(onRetry === null || typeof onRetry === 'function', 'onRetry', 'a function')
  check(Number.isSafeInteger(maxBufferedBody) && maxBufferedBody >= 0, 'maxBufferedBody', 'a number of bytes')
  check(['send', 'refuse', 'hash-first'].includes(largeBody), 'largeBody', "'send', 'refuse' or 'hash-first'")
  check(Number.isSafeInteger(maxDecodedBody) && maxDecodedBody >= 0, 'maxDecodedBody', 'a number of bytes')
  const preferred = [...new Set(algorithms)].map((key) => lookupAlgorithm(key) as Algorithm)
  const wanted = serializePreferences(new Map(preferred.map(({ key }, i) => [key, 10 - i])))
  return {
    algorithms: new Map(preferred.map((algorithm) => [algorithm.key, algorithm])),
    requireVerifiable: unverifiable === 'require',
    field: requestDigest === false ? null : requestDigest,
    preferred,
    want: Object.fromEntries(want.map((field) => [`want-${field}`, wanted])),
    maxRetries,
    onRetry,
    maxBufferedBody,
    largeBody,
    maxDecodedBody
  }
}

/**
 * An interceptor for `compose()` of an undici 7 or 8 dispatcher: generic, since the two majors type
 * dispatch differently (in handler methods the interceptor passes on as they are).
 */
export type DigestInterceptor = <Dispatch extends (options: never, handler: never) => boolean>(dispatch: Dispatch) => Dispatch

/**
 * An undici interceptor, for `dispatcher.compose()`, that adds digests to requests whose content
 * it can know, checks the digests of responses as they stream, and retries once after a digest
 * problem a retry can fix. Compose it first, nearest the connection, so that it sees the bytes as
 * they cross the wire.
 */
export function digestInterceptor (options: DigestInterceptorOptions = {}): DigestInterceptor {
  const settings = clientSettings(options)
  const learnt = new PreferredAlgorithms()
  const intercept: Dispatcher.DispatcherComposeInterceptor = (dispatch) => function dispatchWithDigests (opts, given) {
    // An upgrade or a tunnel has no content of its own to check.
    const upgrade = (opts.upgrade ?? false) !== false || opts.method === 'CONNECT'
    const handler = currentHandler(given, upgrade ? 'upgrade' : 'request')
    if (upgrade) return dispatch(opts, handler)
    const fields = fieldsOf(opts.headers)
    const request = { origin: String(opts.origin), method: opts.method, path: opts.path }
    // A digest the application set is its own: sent as it is, and never replaced on a retry.
    const ours = settings.field !== null && fields[settings.field] === undefined ? settings.field : null
    // The origin's own preference, once a digest problem told it.
    const preferred = ours === null ? null : learnt.of(request.origin) ?? settings.preferred[0] as Algorithm
    const start = (content: Content, relay: Relay | null): boolean => {
      const base: FieldMap = { ...settings.want, ...fields }
      const { bytes, body, contentType, digests } = content
      if (contentType !== undefined && base['content-type'] === undefined) base['content-type'] = contentType
      const digestOf = (algorithm: Algorithm): Buffer | undefined => bytes !== null ? algorithm.digest(bytes) : digests?.get(algorithm)
      const send = (algorithm: Algorithm | null): boolean => {
        if (algorithm !== null && algorithm !== preferred) learnt.learn(request.origin, algorithm)
        const digest = ours === null || algorithm === null ? undefined : digestOf(algorithm)
        const headers = digest === undefined ? base : { ...base, [ours as string]: `${(algorithm as Algorithm).key}=:${digest.toString('base64')}:` }
        return dispatch({ ...opts, headers, body: body as Body }, digestHandler)
      }
      const first = bytes !== null || digests !== undefined ? preferred : null
      const replayable = bytes !== null || body === null || body === undefined
      const digestHandler = new DigestHandler(settings, handler, request, base, replayable, first, send, relay)
      return send(first)
    }
    const known = knownContent(opts.body)
    if (known !== null) return start(known, null)
    // The consumer holds its controller while the body is read, so that its abort ends the read.
    const relay = new Relay()
    handler.onRequestStart?.(relay, {})
    readContent(opts.body, settings.maxBufferedBody, settings.largeBody, preferred, relay.signal).then((content) => start(content, relay), (error: Error) => {
      handler.onResponseError?.(relay, error)
    })
    return true
  }
  return intercept as unknown as DigestInterceptor
}
