/** The symbols under which the plugin keeps its state on Fastify's objects and Node's streams. */

/** A route config's normalized settings: null when `config.digest` is false. */
export const kRouteSettings = Symbol('fastify-digest-fields.route-settings')
/** A request's content still to be judged: its SourceVerifier or TrailerWatch. */
export const kPendingContent = Symbol('fastify-digest-fields.pending-content')
/** Marks the route error handler that answers the plugin's problems, so it wraps once. */
export const kAnswersProblems = Symbol('fastify-digest-fields.answers-problems')
/** On a route: the settings its two response-digest onSend hooks are made with, replaced by a child scope's registration. */
export const kSendDigests = Symbol('fastify-digest-fields.send-digests')
/** On a reply: the representation digests the application supplied (`reply.reprDigest()`). */
export const kSuppliedDigests = Symbol('fastify-digest-fields.supplied-digests')
/** On request.raw: the verifier that took over its push() (a SourceVerifier or CommonCaseVerifier). */
export const kSourceVerifier = Symbol('fastify-digest-fields.source-verifier')
/** On request.raw: the TrailerWatch that watches its end. */
export const kTrailerWatch = Symbol('fastify-digest-fields.trailer-watch')
/** On a reply: the file it serves (set by staticFileDigests()), and the digest fields it sends unasked. */
export const kServedFile = Symbol('fastify-digest-fields.served-file')
/** On a reply: its Unencoded-Digest, found before a content coding was added (response-digests.ts). */
export const kUnencodedDigest = Symbol('fastify-digest-fields.unencoded-digest')
/** On a reply: the payload as the route's first onSend hook saw it. */
export const kFirstPayload = Symbol('fastify-digest-fields.first-payload')
/** On a reply: the send the route's response hooks are on (Fastify's callback for its onSend hooks). */
export const kResponseSend = Symbol('fastify-digest-fields.response-send')
/** On a reply: its first success send held for the request's verdict, with the status and fields it was sent with. */
export const kHeldSend = Symbol('fastify-digest-fields.held-send')
/** On a request: the files saved with request.verifiedFiles(), removed unless committed. */
export const kVerifiedFiles = Symbol('fastify-digest-fields.verified-files')
/** On a reply: the digest fields its last pass through the response hook placed. */
export const kSentDigests = Symbol('fastify-digest-fields.sent-digests')
