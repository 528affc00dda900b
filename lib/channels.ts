/**
 * The diagnostics_channel channels both ends publish on, named as undici names its own
 * (`undici:request:create`). A message is made only when the channel has subscribers.
 */
import { channel } from 'node:diagnostics_channel'

export const channels = {
  /** `{ request, fields, algorithms }`: a request's content matched every integrity field checked. */
  requestVerified: channel('fastify-digest-fields:request:verified'),
  /** `{ request, problem }`: a problem was answered, the DigestProblem with its status and type. */
  requestProblem: channel('fastify-digest-fields:request:problem'),
  /** `{ request, fields, algorithms }`: a response's body matched every digest checked. */
  clientVerified: channel('fastify-digest-fields:client:verified'),
  /** `{ request, error }`: a response's body failed its check (DigestMismatchError or DigestUnverifiableError). */
  clientFailed: channel('fastify-digest-fields:client:failed'),
  /** `{ request, retry }`: a request is sent again after a digest problem, `retry` as onRetry is told. */
  clientRetry: channel('fastify-digest-fields:client:retry')
}
