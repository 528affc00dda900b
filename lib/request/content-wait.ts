/**
 * The plugin's waits for the end of a request's content (a success reply held for its verdict, a
 * parser's partial read, digestVerdict(), commit()), each bounded: the content is read to its end
 * by its readers, or by the plugin once nobody reads it; content that stands still for a stall
 * timeout is taken from readers that hold it, or its request ended when its client sends nothing.
 */
import { Readable, type Writable } from 'node:stream'
import { clientStalled, contentTaken, readerStalled } from '../errors.js'
import type { Source } from './source.js'

/** Told once the content is verified (null), failed (its problem), or cut short (the abort). */
export type Waiter = (failure: Error | null) => void

/**
 * Which readers a wait lets go before they stall: `all` (a parser that took part of the content
 * and handed it on to nobody is done with it), `paused` (a reply went: a reader that paused the
 * content without a pipe stopped), or none before they `stall` (the handler may still be reading).
 */
export type Release = 'all' | 'paused' | 'stall'

function discard (): void {}

/** Makes content nobody reads flow to its end, as Node dumps a request nobody reads. */
function flow (source: Readable): void {
  if (source.listenerCount('data') + source.listenerCount('readable') === 0) {
    source.on('data', discard)
    source.resume()
  }
}

/** What Node's HTTP/1 server gives readers of a request whose client left. */
export function aborted (): Error {
  return Object.assign(new Error('aborted'), { code: 'ECONNRESET' })
}

/**
 * The waiters of one request's content, told by its owner (the SourceVerifier or TrailerWatch)
 * when it concludes. The owner sets `moved` for every chunk that arrives: a check every
 * `timeout` ms that finds none arrived since the last one sees the content stand still, for
 * between one and two timeouts. A client that stopped sending is given up by the owner, which
 * ends its request (`giveUp`).
 */
export class ContentWait {
  moved = true
  readonly #source: Source
  readonly #timeout: number
  readonly #giveUp: (error: Error) => void
  #waiters: Waiter[] = []
  #timer: NodeJS.Timeout | undefined
  #cut: Error | null = null
  readonly #closed = (): void => { this.settle(aborted()) }

  constructor (source: Source, timeout: number, giveUp: (error: Error) => void) {
    this.#source = source
    this.#timeout = timeout
    this.#giveUp = giveUp
  }

  /**
   * Why readers were let go before the end, if they were: the owner then ends the content for them
   * with this error rather than an end that would look complete.
   */
  get cut (): Error | null {
    return this.#cut
  }

  /**
   * Adds a waiter, and reads what nobody reads; with no waiter, only bounds the wait of a reader
   * (a save() of the content), leaving the content to its readers.
   */
  add (waiter: Waiter | null, release: Release): void {
    const source = this.#source
    // Its client left, or it was ended for standing still: it will never conclude.
    if (source.destroyed) {
      waiter?.(source.errored ?? aborted())
      return
    }
    if (waiter !== null) {
      this.#waiters.push(waiter)
      const paused = source.readableFlowing === false && source._readableState.pipes.length === 0
      if (release === 'all' || (release === 'paused' && paused)) this.#letGo(source, contentTaken())
      flow(source)
    }
    if (this.#timer === undefined) {
      this.#timer = setInterval(() => this.#check(), this.#timeout).unref()
      // A client that leaves ends the wait: Node closes its request without an end.
      source.once('close', this.#closed)
    }
  }

  /** Tells every waiter how the content concluded; returns whether any waited. */
  settle (failure: Error | null): boolean {
    clearInterval(this.#timer)
    this.#timer = undefined
    this.#source.off('close', this.#closed)
    const waiters = this.#waiters
    this.#waiters = []
    for (const waiter of waiters) waiter(failure)
    return waiters.length > 0
  }

  #check (): void {
    if (this.moved) {
      this.moved = false
      return
    }
    const source = this.#source
    // Readers that stopped taking it hold what arrived (and the connection paused behind it), in
    // the request or, over HTTP/2, in its stream, which a paused request no longer reads: a
    // pipe's destination is destroyed with the error.
    const stream = (source as Source & { stream?: Readable }).stream
    if (source.readableLength > 0 || source.readableFlowing !== true || (stream?.readableLength ?? 0) > 0) {
      const error = readerStalled(this.#timeout)
      this.#cut ??= error
      for (const destination of [...source._readableState.pipes] as Writable[]) {
        source.unpipe(destination)
        // The application's own stream may have no listener for errors, whose error would end the
        // process: the plugin then hears it, and `errored` still says why.
        if (destination.listenerCount('error') === 0) destination.once('error', discard)
        destination.destroy(error)
      }
      this.#letGo(source, error)
      flow(source)
      return
    }
    // Nothing arrived and nothing waits to be read: the client sends nothing.
    this.#giveUp(clientStalled(this.#timeout))
  }

  // Readers that are let go are told why once the content concludes, in place of its end.
  #letGo (source: Source, why: Error): void {
    if (source.listenerCount('data') + source.listenerCount('readable') === 0) return
    this.#cut ??= why
    source.removeAllListeners('readable')
    source.removeAllListeners('data')
  }
}
