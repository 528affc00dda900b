/** The two response hooks on a route, around the route's own. */
import type { onSendHookHandler, RouteOptions } from 'fastify'
import type { Settings } from '../options/settings.js'
import { kSendDigests } from '../symbols.js'
import { findUnencodedDigest, responseDigests } from './digests.js'
import { dropLaterSend, endsSendOnFailure, isFirstSend, replaceWaitingSend } from './one-send.js'
import type { FileDigests } from './file-digests.js'

type ScheduledRoute = RouteOptions & { [kSendDigests]?: Settings }

/**
 * Puts the route's two response hooks around its own, after every onRoute hook has added its
 * (a microtask runs once the route's onRoute hooks have), so that the digests cover the bytes
 * sent, after @fastify/compress whichever plugin was registered first (RFC 9530 section 2); on
 * Fastify's own HEAD route, just before the hook that drops the GET payload, which is the
 * representation a GET would send. Unencoded-Digest is found first, before any route hook adds a
 * coding. The hooks have the settings of the last registration to see the route (a child scope's).
 */
export function addResponseHooks (route: ScheduledRoute, settings: Settings, files: FileDigests): void {
  const first = route[kSendDigests] === undefined
  route[kSendDigests] = settings
  if (!first) return
  queueMicrotask(() => {
    const onSend = route.onSend === undefined ? [] : [route.onSend].flat()
    const head = onSend.findIndex((hook) => hook.name === 'headRouteOnSendHandler')
    const at = head === -1 ? onSend.length : head
    const last = route[kSendDigests] as Settings
    // With none of the route's own hooks between them, the two run as one: a hook less a response.
    if (at === 0) route.onSend = [oneSendAtATime(findUnencodedDigest(last, files, responseDigests(last, files, false))), ...onSend]
    else {
      route.onSend = [oneSendAtATime(findUnencodedDigest(last, files, null)), ...onSend.slice(0, at).map(endsSendOnFailure),
        responseDigests(last, files, true), ...onSend.slice(at)]
    }
  })
}

/**
 * The route's first response hook, for the first success send to reach it (one-send.ts); a later
 * one is dropped, and an answer of 400 or above replaces one still waiting.
 */
function oneSendAtATime (hook: onSendHookHandler): onSendHookHandler {
  return function firstResponseHook (request, reply, payload, done) {
    if (reply.statusCode >= 400) replaceWaitingSend(reply)
    else if (!isFirstSend(reply, done)) {
      dropLaterSend(request, reply, payload)
      return
    }
    hook.call(this, request, reply, payload, done)
  }
}
