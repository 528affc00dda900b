/** The warnings the plugin logs, each once where it says so. */

/** A route declared before the plugin finished registering: its `config.digest` was never read. */
export function declaredBeforeRegistration (method: string, url: string | undefined): string {
  return `fastify-digest-fields: ${method} ${url} was declared before the plugin was registered, ` +
    'so its config.digest is not read: ' +
    'it is checked with the plugin defaults and its problems are answered by the application\'s error handler. ' +
    'Declare routes after `await fastify.register(fastifyDigestFields)`.'
}

/** A reply sent again while its first send was on its way: the later send is dropped. */
export function sentTwice (method: string, url: string): string {
  return `fastify-digest-fields: ${method} ${url} sent its reply twice (an async handler or hook that called reply.send() ` +
    'and did not return the reply?): the first send is sent, the later one dropped'
}

/** An error after a success reply was sent, while the reply waits for the verdict: Fastify alone would have sent the reply. */
export function errorAfterSend (method: string, url: string): string {
  return `fastify-digest-fields: ${method} ${url} failed after its reply was sent: ` +
    'the reply goes as it was sent once the content is verified, and the error is not answered'
}

/** A stream sent after the plugin answered the request's problem in the application's place. */
export function sentAfterProblem (method: string, url: string): string {
  return `fastify-digest-fields: ${method} ${url} sent a stream after its content's problem was answered: ` +
    'the stream is destroyed'
}

/** A file saved with request.verifiedFiles() and not committed that could not be removed. */
export function uncommittedFileKept (error: unknown): string {
  return `fastify-digest-fields: a file saved and not committed could not be removed: ${(error as Error).message}`
}
