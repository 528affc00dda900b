/** The symbols under which the plugin keeps its state on Fastify's objects and Node's streams. */

/** A route config's normalized settings: null when `config.digest` is false. */
export const kRouteSettings = Symbol('fastify-digest-fields.route-settings')
/** A request's content still to be judged: its SourceVerifier or TrailerWatch. */
export const kPendingContent = Symbol('fastify-digest-fields.pending-content')
/** Marks the route error handler that answers the plugin's problems, so it wraps once. */
export const kAnswersProblems = Symbol('fastify-digest-fields.answers-problems')
/** On a route: the settings its two response-digest onSend hooks are made with, replaced by a child scope's registration. */
export const kSendDigests = Symbol('fastify-digest-fields.send-digests')
/** On a reply: the plugin's state (response/reply-state.ts), made on first use. */
export const kReplyState = Symbol('fastify-digest-fields.reply-state')
/** On request.raw: the verifier that took over its push() (a SourceVerifier or CommonCaseVerifier). */
export const kSourceVerifier = Symbol('fastify-digest-fields.source-verifier')
/** On request.raw: the TrailerWatch that watches its end. */
export const kTrailerWatch = Symbol('fastify-digest-fields.trailer-watch')
/** On a request: the files saved with request.verifiedFiles(), removed unless committed. */
export const kVerifiedFiles = Symbol('fastify-digest-fields.verified-files')
