/** Digests on responses: Want-* fields answered and unasked digests sent, in the header section where known first. */
import type { DoneFuncWithErrOrRes, FastifyInstance, FastifyReply, FastifyRequest, onSendHookHandler } from 'fastify'
import type { Algorithm } from '../fields/algorithms.js'
import type { FileDigests } from './file-digests.js'
import type { Settings } from '../options/settings.js'
import { canTrail, digestsOfPayload } from './payload-digests.js'
import { chosen, preferencesOf } from '../fields/preferences.js'
import { representationAlgorithm } from './fields.js'
import { codingsOfReply, coverage, fileOf } from './coverage.js'
import { uploadReprDigests } from '../uploads/resumable.js'
import { continueSend } from './continue-send.js'
import { dropPayload, handOn, resumesAfterWait, sentAs, wasReplaced } from './one-send.js'
import { replyState, type Unencoded } from './reply-state.js'
import { codingsToFindAgain, findDigestFields, mustHashToSign, withdrawDigestFields, type Placement } from './sent-fields.js'

/**
 * Hands the first hook's payload on: to the last hook (`next`) when no route hook runs between
 * them, so that the two run as one, without a callback of their own a response; else to Fastify.
 */
function handOnward (next: onSendHookHandler | null, instance: FastifyInstance, request: FastifyRequest,
  reply: FastifyReply, payload: unknown, done: DoneFuncWithErrOrRes): void {
  if (next === null) continueSend(done, payload)
  else next.call(instance, request, reply, payload, done)
}

/**
 * An onSend hook, the first of the route's own, that finds the Unencoded-Digest of a response
 * before a content coding is added to it (@fastify/compress): of the payload with every coding it
 * already has removed (draft-ietf-httpbis-unencoded-digest, section 3); then hands it on.
 */
export function findUnencodedDigest (settings: Settings, files: FileDigests, next: onSendHookHandler | null): onSendHookHandler {
  const unaskedOnRoute = settings.signer !== null || settings.responseDigests.includes('unencoded-digest')
  return function findUnencodedDigest (request, reply, payload, done) {
    const state = replyState(reply)
    // Hooks run again for the answer to an error: what an earlier payload found is not its.
    state.unencoded = null
    state.firstPayload = payload
    const served = state.servedFile
    const wantField = request.headers['want-unencoded-digest']
    const unasked = unaskedOnRoute || served?.fields.includes('unencoded-digest') === true
    // Most responses are done with here, after three lookups.
    if (wantField === undefined && !unasked) {
      handOnward(next, this, request, reply, payload, done)
      return
    }
    const covers = coverage(request, reply.statusCode)
    const codings = codingsOfReply(reply)
    // A supplied digest is of the representation as the handler sent it: unencoded if uncoded.
    const supplied = codings?.length === 0 ? state.supplied : null
    const algorithm = representationAlgorithm(settings, preferencesOf(wantField), unasked,
      (known) => supplied?.[known.key] !== undefined)
    if (algorithm === null || covers.repr === 'none' || codings === null) {
      handOnward(next, this, request, reply, payload, done)
      return
    }
    const value = supplied?.[algorithm.key]
    if (value !== undefined) {
      const digests = { now: new Map([[algorithm, value]]) }
      state.unencoded = { algorithm, digests, handedOn: payload, codings, status: reply.statusCode }
      handOnward(next, this, request, reply, payload, done)
      return
    }
    const file = fileOf(reply, payload)
    // A 204's content is empty, with nothing to decode whatever its Content-Encoding says.
    const empty = reply.statusCode === 204
    const content = empty ? '' : payload ?? ''
    // Without a payload that is the representation (206, 304) only the whole file gives its digest.
    const whole = covers.repr === 'payload'
    const source = whole ? content : null
    const target = whole || file === null ? file : { path: file.path }
    const as = sentAs(reply)
    const onward = (handedOn: unknown, found: Unencoded | null): void => {
      // A send replaced meanwhile leaves nothing for the answer that replaced it.
      if (!resumesAfterWait(reply, done, handedOn, as)) return
      state.unencoded = found
      handOnward(next, this, request, reply, handedOn, done)
    }
    digestsOfPayload(source, empty ? [] : codings, [algorithm], target, files, mustHashToSign(request, settings), canTrail(request)).then((digests) => {
      const handedOn = digests !== null && 'payload' in digests ? digests.payload : payload
      onward(handedOn, { algorithm, digests, handedOn, codings, status: reply.statusCode })
    }, () => { onward(payload, null) })
  }
}

/**
 * An onSend hook, the last of the route, that answers Want-Content-Digest and Want-Repr-Digest,
 * sends the route's unasked digests and the Unencoded-Digest found before coding, and signs it.
 * What is known before the content is sent goes in the header section, with Content-Length kept;
 * a stream is hashed as it is sent and its fields go in the trailer section (Fastify's
 * reply.trailer), never buffered.
 */
export function responseDigests (settings: Settings, files: FileDigests, hooksBetween: boolean): onSendHookHandler {
  const unsolicitedContent = settings.responseDigests.includes('content-digest')
  const unsolicitedRepr = settings.responseDigests.includes('repr-digest')
  const preferred = settings.algorithms.values().next().value as Algorithm

  return function sendDigests (request, reply, payload, done) {
    // A send replaced while a route hook between made it wait must not take the answer's fields back.
    if (wasReplaced(reply, done)) {
      dropPayload(payload)
      return
    }
    withdrawDigestFields(reply)
    const state = replyState(reply)
    const { headers } = request
    const wantContentField = headers['want-content-digest']
    const wantReprField = headers['want-repr-digest']
    const wantUnencodedField = headers['want-unencoded-digest']
    const { servedFile: served, unencoded: found } = state
    const upload = uploadReprDigests(request, reply.statusCode, payload)
    if (wantContentField === undefined && wantReprField === undefined && wantUnencodedField === undefined &&
      !unsolicitedContent && !unsolicitedRepr && served === null && found === null && upload === null) {
      handOn(reply, done, payload)
      return
    }
    const covers = coverage(request, reply.statusCode)
    // Problems and redirects carry no digest, and do not vary for one.
    if (!covers.content && covers.repr === 'none') {
      handOn(reply, done, payload)
      return
    }
    const varies = [
      wantContentField === undefined ? [] : 'Want-Content-Digest',
      wantReprField === undefined ? [] : 'Want-Repr-Digest',
      wantUnencodedField === undefined ? [] : 'Want-Unencoded-Digest'
    ].flat()
    // A content coding added after the handler (@fastify/compress) changes the representation
    // the application knew the digest of (RFC 9530 section 3): it is hashed instead.
    const codings = codingsOfReply(reply)
    // A route hook between the first and this one may have changed the content, a Buffer in place
    // too: its Unencoded-Digest is then found again over what reaches this hook, and a supplied
    // digest not sent; after a coding the plugin cannot remove (aes128gcm), none is sent
    // (draft-ietf-httpbis-unencoded-digest section 3).
    const untouched = (handedOn: unknown): boolean => !hooksBetween || (payload === handedOn && !Buffer.isBuffer(payload))
    // Made a 304 or a 206 by a route hook, the response no longer sends the payload the first hook
    // found the digest of, as its representation: none is sent (a 304 takes no trailer section).
    const statusKept = found === null || found.status === reply.statusCode || covers.repr === 'payload'
    const unencoded = codings === null || !statusKept ? null : found
    const unencodedAgain = unencoded === null || covers.repr !== 'payload'
      ? null
      : codingsToFindAgain(unencoded, reply.statusCode, payload, codings as string[], untouched(unencoded.handedOn))
    const supplied = upload?.digests ??
      (codings?.length === 0 && untouched(state.firstPayload) ? state.supplied : null)
    const isSupplied = (algorithm: Algorithm): boolean => supplied?.[algorithm.key] !== undefined
    const fields = new Set([...settings.responseDigests, ...(served?.fields ?? [])])
    const wantContent = preferencesOf(wantContentField)
    const wantRepr = preferencesOf(wantReprField) ?? upload?.want ?? null
    const contentAlgorithm = !covers.content
      ? null
      : wantContent !== null
        ? chosen(settings.algorithms, wantContent, () => true)
        : fields.has('content-digest') ? preferred : null
    // Every response that gets here has a representation (those without one went above).
    // An upload's answer without content sends the upload's digest so far, or none.
    const reprAlgorithm = upload === null
      ? representationAlgorithm(settings, wantRepr, fields.has('repr-digest'), isSupplied)
      : wantRepr === null ? null : chosen(settings.algorithms, wantRepr, isSupplied)
    const reprSupplied = reprAlgorithm === null ? undefined : supplied?.[reprAlgorithm.key]
    const plan = { contentAlgorithm, reprAlgorithm, reprSupplied, unencoded, unencodedAgain, varies, covers, files, settings }
    // Placed in the turn that hands the reply on, which Fastify then writes (this hook is the last).
    const as = sentAs(reply)
    const onward = (sending: unknown, placement?: Placement): void => {
      if (resumesAfterWait(reply, done, sending, as)) handOn(reply, done, sending, placement)
    }
    findDigestFields(request, reply, payload, plan).then((placement) => { onward(placement.payload, placement) },
      () => { onward(payload) })
  }
}
