/** Expect: 100-continue: the 100 goes out once something reads the content, so a refusal goes out instead of it. */
import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Http2ServerRequest, Http2ServerResponse } from 'node:http2'
import type { EventEmitter } from 'node:events'

type Request = (IncomingMessage | Http2ServerRequest) & { _read: (size: number) => void }
type Response = (ServerResponse | Http2ServerResponse) & { writeContinue: () => void }

const deferring = new WeakSet<EventEmitter>()

/**
 * Answers `Expect: 100-continue` (RFC 9110 section 10.1.1) as late as it can: Node sends the 100
 * before Fastify routes the request, while a server may answer with the final status instead, so
 * that a client does not send content that will be refused. The request goes to Fastify at once,
 * and its 100 is sent when a parser, a handler or the plugin first reads the content; a request
 * refused before that gets its final status alone (and Node closes the connection, since the
 * content may still come). A server whose application listens for `checkContinue` itself, before
 * or after the plugin was registered, is left to it.
 *
 * HTTP/2 requests get their 100 at once, as without the plugin: an early final response ends with
 * RST_STREAM(NO_ERROR) (RFC 9113 section 8.1), which undici left hanging without a 100 until
 * mid-2026 (nodejs/undici#5465), and which curl 7.88 took for an empty reply in 36 of 60 runs
 * without a 100 (20 of 60 with one).
 */
export function deferContinue (server: EventEmitter): void {
  if (deferring.has(server) || server.listenerCount('checkContinue') > 0) return
  deferring.add(server)
  server.on('checkContinue', (request: Request, response: Response) => {
    // An application listening too, even one that started after the plugin, answers alone: two
    // listeners would hand Fastify the request twice.
    if (server.listenerCount('checkContinue') > 1) return
    if (request.httpVersionMajor === 2) {
      response.writeContinue()
      server.emit('request', request, response)
      return
    }
    const read = request._read
    request._read = function readAfterContinue (size) {
      request._read = read
      // Dumping the content of a request already answered must not invite it.
      if (!response.headersSent) response.writeContinue()
      read.call(this, size)
    }
    server.emit('request', request, response)
  })
}
