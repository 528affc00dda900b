/** An onSend hook's `done`, called on a later turn. */

export type SendDone = (error: Error | null, payload?: unknown) => void

/**
 * Calls an onSend hook's `done` from a later turn (a promise's, a verdict's) as Fastify calls it
 * for a hook that returned a promise: what the rest of the send throws (writeHead for a reply that
 * a second send wrote first, a header value Node refuses) goes back to Fastify as the hook's error,
 * which it logs or answers, and not to the event loop, which would end the process.
 */
export function continueSend (done: SendDone, payload: unknown): void {
  try {
    done(null, payload)
  } catch (error) {
    done(error as Error)
  }
}
