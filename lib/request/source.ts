/**
 * The request stream, request.raw, as the plugin takes it over: every Node and light-my-request
 * internal the plugin relies on is here, with why.
 *
 * - `push(chunk)` and `push(null)`: Node's HTTP/1 parser (parserOnBody, parserOnMessageComplete),
 *   its HTTP/2 compatibility layer (onStreamData, onStreamCloseRequest) and light-my-request feed
 *   the stream through its own push(), after setting `trailers`; replaced on the instance so that
 *   each chunk is seen before any reader. Node stops reading the connection when it returns false.
 * - `_read(size)`: a reader asking for more resumes the connection (HTTP/1 readStart, HTTP/2
 *   resumeStream, light-my-request's payload); replaced while a decoder's input is full.
 * - `_readableState.buffer`, `.bufferIndex`, `.length`, `.ended`: what was buffered before the
 *   plugin's hook ran, taken back to be held; `.pipes`: the pipes a wait for the content cuts off
 *   when they stall (content-wait.ts).
 * - `_destroy`: replaced at a failure, so that destroying keeps the connection (Node's own would
 *   close it) and emits 'error' only where someone listens; a request given up is closed through
 *   its `socket` (HTTP/1.1) or its HTTP/2 `stream`.
 * - light-my-request's `_lightMyRequest` marker: its request ignores a destroy once its payload is
 *   pushed, listens for 'error' itself (once), and pushes an end on every read once done.
 * - Node's `OutgoingMessage._removedConnection` (index.ts): removeHeader('connection') sets it.
 */
import type { IncomingHttpHeaders } from 'node:http'
import { constants, type Http2Stream } from 'node:http2'
import type { Socket } from 'node:net'
import { Readable } from 'node:stream'
import { integrityFields } from '../fields/sections.js'
import { kSourceVerifier } from '../symbols.js'

export type Source = Readable & {
  trailers?: IncomingHttpHeaders
  _readableState: { buffer: Array<Buffer | null>, bufferIndex: number, length: number, ended: boolean, pipes: NodeJS.WritableStream[] }
}

/** What took a request stream's push() over: it sees each chunk and the end before any reader. */
export interface Receiver {
  receive (chunk: Buffer | string | null): boolean
}

type ReceivingSource = Source & { [kSourceVerifier]?: Receiver | undefined }

// Installed on the request stream in place of its push(): shared by every request, so no closure is
// made per request; the receiver is found on the stream.
function pushThroughReceiver (this: ReceivingSource, chunk: Buffer | string | null): boolean {
  return (this[kSourceVerifier] as Receiver).receive(chunk)
}

/** Takes over the stream's push(), through which the connection delivers every chunk and the end. */
export function takeOverPush (source: Source, receiver: Receiver): void {
  (source as ReceivingSource)[kSourceVerifier] = receiver
  source.push = pushThroughReceiver
}

/** Gives the stream back the push() that takeOverPush() replaced. */
export function giveBackPush (source: Source, push: (chunk: Buffer | null) => boolean): void {
  source.push = push
  ;(source as ReceivingSource)[kSourceVerifier] = undefined
}

function refuseEnd (): boolean {
  return false
}

// A Readable's 'error' reaches only listeners, as IncomingMessage's does: a reader without one sees
// neither an end nor an uncaught exception. Destroying without the request's own _destroy also
// keeps the connection, whose message is complete, so that the 400 can still be sent.
function destroyQuietly (this: Readable, error: Error | null, callback: (error?: Error | null) => void): void {
  callback(this.listenerCount('error') > 0 ? error : null)
}

/** Gives readers the problem (or an abort) in place of the end; returns whether any of them listens for it. */
export function failSource (source: Readable, problem: Error): boolean {
  // inject()'s request (light-my-request) ignores a destroy once its payload is pushed, and takes
  // an error on a destroyed request for a broken response: it is given the error alone, heard only
  // by listeners besides its own. Nor may it end later: it pushes an end on every read once done.
  if ('_lightMyRequest' in source) {
    source.push = refuseEnd
    const heard = source.listenerCount('error') > 1
    if (heard) source.emit('error', problem)
    return heard
  }
  const heard = source.listenerCount('error') > 0
  source._destroy = destroyQuietly
  Readable.prototype.destroy.call(source, problem)
  return heard
}

/**
 * Ends a request whose client stopped sending, as Node ends one whose client left: its readers get
 * the error where they listen for it, and its connection is closed (HTTP/1.1) or its stream reset
 * (HTTP/2, whose request is not the stream and whose destroy() would leave it open).
 */
export function closeRequest (source: Readable, error: Error): void {
  failSource(source, error)
  const { stream, socket } = source as Readable & { stream?: Http2Stream, socket?: Socket }
  if (stream !== undefined) stream.close(constants.NGHTTP2_CANCEL)
  else socket?.destroy()
}

/**
 * Whether a request's content ended because its client left: Node's HTTP/2 compatibility layer
 * ends a request whose stream was reset as if it were complete (onStreamCloseRequest pushes the end
 * after 'aborted').
 */
export function isCutShort (source: Readable): boolean {
  return (source as { aborted?: boolean }).aborted === true
}

/** Whether a trailer section carries an integrity field. */
export function hasIntegrityTrailer (trailers: IncomingHttpHeaders | undefined): boolean {
  return trailers !== undefined && integrityFields.some((field) => trailers[field] !== undefined)
}
