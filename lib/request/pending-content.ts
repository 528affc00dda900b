/**
 * Content whose verdict may still be pending when a later hook, the handler or the reply needs it:
 * what the SourceVerifier and the TrailerWatch share, a wait for their conclusion and the way that
 * conclusion reaches the content's readers.
 */
import type { DigestProblem } from '../problems/problems.js'
import { aborted, ContentWait, type Release, type Waiter } from './content-wait.js'
import { closeRequest, failSource, type Source } from './source.js'

export abstract class PendingContent {
  // TypeScript-private, not #private: made for every request with a digest (docs/development.md).
  /** Whether the content concluded: verified, failed or cut short. */
  settled = false
  /** Why the content failed (its DigestProblem) or was cut short, once it concluded; else null. */
  failure: Error | null = null
  // Made when something waits for the verdict: most requests never need one.
  private wait: ContentWait | null = null

  constructor (protected readonly source: Source) {}

  /** Whether the route is one the plugin verifies (a trailer watch also sees routes with digest: false). */
  abstract get covered (): boolean

  /** The route's stallTimeout. */
  protected abstract stallTimeout (): number

  /** Gives the request stream back what the plugin took over of it. */
  abstract detach (): void

  /**
   * Tells `waiter` once the content concluded; the rest is read to its end by its readers, or by
   * the plugin (ContentWait), which lets readers go as `release` says. Without a waiter, only
   * bounds the wait of a reader of the content.
   */
  whenSettled (waiter: Waiter | null, release: Release): void {
    this.wait ??= new ContentWait(this.source, this.stallTimeout(), (error) => this.abort(error, true))
    this.wait.add(waiter, release)
  }

  /** A chunk arrived: a wait that watches for content standing still sees it move. */
  arrived (): void {
    if (this.wait !== null) this.wait.moved = true
  }

  /**
   * Ends content cut short, nothing judged: readers get `error` (by default what Node gives readers
   * of a request whose client left), and with `close` (its client stopped sending) the request is ended.
   */
  abort (error = aborted(), close = false): void {
    this.detach()
    this.settle(error)
    if (close) closeRequest(this.source, error)
    else failSource(this.source, error)
    this.wait?.settle(error)
  }

  /**
   * Concludes content that verified: what was held and the end go to readers through the stream's
   * own `push`, unless a wait let readers go before it, who are then told why rather than seeing an
   * end that looks complete.
   */
  protected concludeVerified (held: readonly Buffer[], push: (chunk: Buffer | null) => boolean): boolean {
    this.settle(null)
    const cut = this.wait?.cut ?? null
    if (cut !== null) failSource(this.source, cut)
    let more = false
    if (cut === null) {
      for (const chunk of held) push.call(this.source, chunk)
      more = push.call(this.source, null)
    }
    this.wait?.settle(null)
    return more
  }

  /** Concludes content that failed: its readers get the problem, and `unheard` is told when nobody waited. */
  protected concludeFailed (problem: DigestProblem, unheard: (heard: boolean) => void): void {
    this.settle(problem)
    const heard = failSource(this.source, problem)
    if (this.wait?.settle(problem) !== true) unheard(heard)
  }

  private settle (failure: Error | null): void {
    this.settled = true
    this.failure = failure
  }
}
