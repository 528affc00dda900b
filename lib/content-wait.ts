/**
 * The plugin's waits for the end of a request's content (a success reply held for its verdict, a
 * parser's partial read, digestVerdict(), commit()), each bounded: the content is read to its end
 * by its readers, or by the plugin once nobody reads it; content that stands still for a stall
 * timeout is taken from readers that hold it, or its request ended when its client sends nothing.
 */
import { Readable, type Writable } from 'node:stream'
import { clientStalled, readerStalled } from './errors.js'
import { failSource, type Source } from './source.js'

/** Told once the content is verified (null), failed (its problem), or cut short (the abort). */
export type Waiter = (failure: Error | null) => void

/**
 * Which readers a wait lets go before they stall: `all` (a parser that took part of the content
 * and handed it on to nobody is done with it), `paused` (a reply went: a reader that paused the
 * content without a pipe stopped), or none before they `stall` (the handler may still be reading).
 */
export type Release = 'all' | 'paused' | 'stall'

function discard (): void {}

/** Lets every reader of the content go, without a word: for a reader that is known to be done. */
function letGo (source: Readable): void {
  source.removeAllListeners('readable')
  source.removeAllListeners('data')
}

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
 * between one and two timeouts.
 */
export class ContentWait {
  moved = true
  readonly #source: Source
  readonly #timeout: number
  #waiters: Waiter[] = []
  #timer: NodeJS.Timeout | undefined
  // Readers were cut off: the stream ends for them with an error even once it verified.
  #cut: Error | null = null
  readonly #closed = (): void => { this.settle(aborted()) }

  constructor (source: Source, timeout: number) {
    this.#source = source
    this.#timeout = timeout
  }

  /** Adds a waiter, and reads what nobody reads. */
  add (waiter: Waiter, release: Release): void {
    const source = this.#source
    // Its client left, or it was ended for standing still: it will never conclude.
    if (source.destroyed) {
      waiter(source.errored ?? aborted())
      return
    }
    this.#waiters.push(waiter)
    const paused = source.readableFlowing === false && source._readableState.pipes.length === 0
    if (release === 'all' || (release === 'paused' && paused)) letGo(source)
    flow(source)
    if (this.#timer === undefined) {
      this.#timer = setInterval(() => this.#check(), this.#timeout).unref()
      // A client that leaves ends the wait: Node closes its request without an end.
      source.once('close', this.#closed)
    }
  }

  /** Tells every waiter how the content concluded; returns whether any waited. */
  settle (failure: Error | null): boolean {
    this.#stop()
    const waiters = this.#waiters
    this.#waiters = []
    // A reader cut off before the end sees an error, never an end that looks complete.
    if (failure === null && this.#cut !== null) failSource(this.#source, this.#cut)
    for (const waiter of waiters) waiter(failure)
    return waiters.length > 0
  }

  #stop (): void {
    clearInterval(this.#timer)
    this.#timer = undefined
    this.#source.off('close', this.#closed)
  }

  #check (): void {
    if (this.moved) {
      this.moved = false
      return
    }
    const source = this.#source
    // Readers that stopped taking it hold what arrived (and the connection paused behind it).
    if (source.readableLength > 0) {
      this.#cutReaders(source)
      return
    }
    // Nothing arrived and nothing waits to be read: the client sends nothing. Its request is
    // ended as Node ends one whose client left, which closes the connection.
    const error = clientStalled(this.#timeout)
    source.destroy(error)
    this.settle(error)
  }

  /** Cuts off readers that hold the content: a pipe's destination is destroyed with the error. */
  #cutReaders (source: Source): void {
    const error = readerStalled(this.#timeout)
    this.#cut = error
    for (const destination of [...source._readableState.pipes] as Writable[]) {
      source.unpipe(destination)
      destination.destroy(error)
    }
    letGo(source)
    flow(source)
  }
}
