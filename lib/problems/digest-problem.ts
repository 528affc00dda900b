/** The error every refusal is: what a hook hands to Fastify, answered by the plugin's error handler. */
import type { LogLevel } from 'fastify'
import type { DigestProblemDocument } from './documents.js'
import { problemCodes, type ProblemCode } from '../errors.js'
import type { FieldName } from '../findings.js'
import type { ProblemSchema } from './schemas.js'

/** A refused request: the error a hook hands to Fastify, answered by the plugin's error handler. */
export class DigestProblem extends Error {
  /** What was found, from the catalogue in errors.ts; only the status under disclosure `none`. */
  code: ProblemCode = problemCodes[400]

  constructor (
    /** The problem type that was found, logged even when the response does not disclose it. */
    readonly type: string,
    message: string,
    readonly document: DigestProblemDocument,
    readonly schema: ProblemSchema,
    readonly headers: Readonly<Record<string, string>> = {},
    readonly statusCode = 400
  ) {
    super(message)
    this.name = 'DigestProblem'
  }

  /** The level of the problem's log line, the route's `problemLogLevel`. */
  logLevel: LogLevel = 'info'
  /** What the log line names: each field and algorithm found wrong, never a digest value. */
  found: ReadonlyArray<{ readonly field: FieldName, readonly algorithm: string }> = []
  /** How many findings `found` leaves out (it lists at most `maxListed`). */
  notListed = 0
  /** The message of the problem's log line, which names what was found whatever is disclosed. */
  logMessage = ''
}
