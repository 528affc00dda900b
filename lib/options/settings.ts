/** The plugin's and routes' options, checked and normalized once into the settings every request reads. */
import type { FastifyRequest, LogLevel } from 'fastify'
import type {
  DigestAlgorithms,
  DigestDisclosure,
  DigestProblemTypes,
  DigestRouteConfig,
  ResponseDigestField,
  FastifyDigestFieldsOptions
} from '../types.js'
import { isUnimplementedAlgorithm, lookupAlgorithm, type Algorithm } from '../fields/algorithms.js'
import { serializePreferences } from '../fields/preferences.js'
import {
  checkBoolean,
  checkKeys,
  checkObject,
  checkOneOf,
  checkResponseFields,
  checkSize,
  checkTimeout,
  fail,
  show
} from './checks.js'
import { integritySigner, type IntegritySigner } from './integrity-signatures.js'

/** `config.digest.resumable`: whether a route creates uploads, or where an append's upload state is. */
export interface ResumableSettings {
  readonly creation: boolean
  readonly loadState: ((request: FastifyRequest) => unknown) | null
}

/** Options normalized once, at registration or route declaration; every request reads only this. */
export interface Settings {
  /** Supported algorithms by key, most preferred first. */
  readonly algorithms: ReadonlyMap<string, Algorithm>
  /** Preference weight (1 to 10) of each supported key, as advertised in `Want-*` fields. */
  readonly preferences: ReadonlyMap<string, number>
  /** `preferences` serialized as a structured-field dictionary. */
  readonly wantField: string
  readonly strictAlgorithms: boolean
  readonly required: boolean
  readonly disclosure: DigestDisclosure
  readonly problemTypes: DigestProblemTypes
  readonly problemLogLevel: LogLevel
  /** The digest fields sent on every successful response, asked for or not. */
  readonly responseDigests: readonly ResponseDigestField[]
  /** Problem type URIs are this plus the type name. */
  readonly typeBase: string
  /** Signs the Unencoded-Digest of every response that carries one in its header section. */
  readonly signer: IntegritySigner | null
  /** The route takes resumable uploads: a running digest is carried between requests. */
  readonly resumable: ResumableSettings | null
  /** How long a wait of the plugin's for the content lets it stand still (request/content-wait.ts). */
  readonly stallTimeout: number
}

/** How the file digest cache is bounded, and which first responses wait for a file to be hashed. */
export interface FileDigestLimits {
  /** Files up to this size are hashed before their first response is sent. */
  readonly hashBeforeSending: number
  /** Versions of files whose digests are kept; the least recently used goes first. */
  readonly maxEntries: number
}

const defaultAlgorithms = ['sha-256', 'sha-512'] as const
const defaultProblemTypesBase = 'https://iana.org/assignments/http-problem-types'
const disclosures: readonly DigestDisclosure[] = ['full', 'no-calculated-digest', 'none']
const shapes: readonly DigestProblemTypes[] = ['draft-00', 'registered']
const logLevels: readonly LogLevel[] = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']
const routeKeys = [
  'algorithms', 'strictAlgorithms', 'required', 'disclosure', 'problemTypes', 'problemLogLevel', 'responseDigests',
  'integritySignatures', 'stallTimeout'
]
const pluginKeys = [...routeKeys, 'problemTypesBase', 'fileDigests']
// What only a route can say: where the state of its uploads is.
const routeOnlyKeys = [...routeKeys, 'resumable']
// Long enough for a writer that stops for a busy disk, short enough that a client is not kept waiting.
const defaultStallTimeout = 10_000
const fileDigestDefaults: FileDigestLimits = { hashBeforeSending: 4 * 1024 * 1024, maxEntries: 10_000 }

function resolveAlgorithm (where: string, key: unknown): Algorithm {
  const algorithm = typeof key === 'string' ? lookupAlgorithm(key) : undefined
  if (algorithm !== undefined) return algorithm
  if (typeof key === 'string' && isUnimplementedAlgorithm(key)) {
    fail(where, `algorithm ${show(key)} is registered for digest fields but is not a hash this plugin computes`)
  }
  return fail(where, `unknown algorithm ${show(key)} (expected sha-256, sha-512, or the deprecated md5 or sha)`)
}

function normalizeAlgorithms (where: string, value: DigestAlgorithms): Map<string, [Algorithm, number]> {
  // An array states order only; weights count down from 10 so that the first is the most preferred.
  const entries: Array<[unknown, unknown]> = Array.isArray(value)
    ? value.map((key: unknown, index) => [key, 10 - index])
    : typeof value === 'object' && value !== null
      ? Object.entries(value)
      : fail(where, `algorithms must be an array of algorithm keys or an object of key to weight, got ${show(value)}`)
  if (entries.length === 0) fail(where, 'algorithms must name at least one algorithm')
  const result = new Map<string, [Algorithm, number]>()
  for (const [key, weight] of entries) {
    const algorithm = resolveAlgorithm(where, key)
    if (result.has(algorithm.key)) fail(where, `algorithm ${show(key)} is listed twice`)
    if (typeof weight !== 'number' || !Number.isInteger(weight) || weight < 1 || weight > 10) {
      fail(where, `the weight of ${show(key)} must be an integer from 1 to 10, got ${show(weight)}`)
    }
    result.set(algorithm.key, [algorithm, weight])
  }
  // Most preferred first, whatever order an object listed them in.
  return new Map([...result].sort((a, b) => b[1][1] - a[1][1]))
}

function normalizeBase (value: unknown): string {
  if (typeof value !== 'string' || !URL.canParse(value) || value.includes('#')) {
    fail('options', `problemTypesBase must be an absolute URI without a fragment, got ${show(value)}`)
  }
  return value + '#'
}

function build (where: string, options: DigestRouteConfig, inherited: Settings | undefined, typeBase: string):
Settings {
  const {
    algorithms,
    strictAlgorithms = inherited?.strictAlgorithms ?? false,
    required = inherited?.required ?? false,
    disclosure = inherited?.disclosure ?? 'full',
    problemTypes = inherited?.problemTypes ?? 'draft-00',
    problemLogLevel = inherited?.problemLogLevel ?? 'info',
    responseDigests = inherited?.responseDigests ?? [],
    integritySignatures,
    resumable,
    stallTimeout = inherited?.stallTimeout ?? defaultStallTimeout
  } = options
  checkOneOf(where, 'disclosure', disclosures, disclosure)
  checkOneOf(where, 'problemTypes', shapes, problemTypes)
  checkOneOf(where, 'problemLogLevel', logLevels, problemLogLevel)
  checkResponseFields(where, 'responseDigests', responseDigests)
  const common = {
    strictAlgorithms: checkBoolean(where, 'strictAlgorithms', strictAlgorithms),
    required: checkBoolean(where, 'required', required),
    disclosure,
    problemTypes,
    problemLogLevel,
    responseDigests,
    typeBase,
    signer: integritySignatures === undefined
      ? inherited?.signer ?? null
      : integritySignatures === false ? null : integritySigner(where, integritySignatures),
    resumable: resumable === undefined ? null : resumableSettings(where, resumable),
    stallTimeout: checkTimeout(where, 'stallTimeout', stallTimeout)
  }
  if (algorithms === undefined && inherited !== undefined) return { ...inherited, ...common }
  const normalized = normalizeAlgorithms(where, algorithms ?? defaultAlgorithms)
  const preferences = new Map([...normalized].map(([key, [, weight]]) => [key, weight]))
  return {
    ...common,
    algorithms: new Map([...normalized].map(([key, [algorithm]]) => [key, algorithm])),
    preferences,
    wantField: serializePreferences(preferences)
  }
}

function resumableSettings (where: string, value: unknown): ResumableSettings {
  checkObject(`${where}: resumable`, value)
  checkKeys(`${where}: resumable`, value, ['creation', 'loadState'])
  const { creation = false, loadState = null } = value as { creation?: unknown, loadState?: unknown }
  checkBoolean(where, 'resumable.creation', creation)
  if (loadState !== null && typeof loadState !== 'function') {
    fail(where, `resumable.loadState must be a function, got ${show(loadState)}`)
  }
  // An upload resource that also created uploads would take a request to an upload it holds for a
  // new upload, without the digest its creation gave.
  if ((creation === true) === (loadState !== null)) {
    fail(where, 'resumable takes creation: true (the route creates uploads) or loadState (it takes appends), not both')
  }
  return { creation: creation as boolean, loadState: loadState as ResumableSettings['loadState'] }
}

/** The bounds of the plugin's file digest cache (response/file-digests.ts). */
export function fileDigestLimits (options: FastifyDigestFieldsOptions): FileDigestLimits {
  const { fileDigests = {} } = options
  checkObject('options.fileDigests', fileDigests)
  checkKeys('options.fileDigests', fileDigests, Object.keys(fileDigestDefaults))
  const { hashBeforeSending = fileDigestDefaults.hashBeforeSending, maxEntries = fileDigestDefaults.maxEntries } =
    fileDigests
  return {
    hashBeforeSending: checkSize('options.fileDigests', 'hashBeforeSending', hashBeforeSending),
    maxEntries: checkSize('options.fileDigests', 'maxEntries', maxEntries)
  }
}

/** The plugin options, which are the defaults of every route. */
export function pluginSettings (options: FastifyDigestFieldsOptions): Settings {
  checkObject('options', options)
  checkKeys('options', options, pluginKeys)
  return build('options', options, undefined, normalizeBase(options.problemTypesBase ?? defaultProblemTypesBase))
}

/** A route's settings: the plugin defaults overridden by `config.digest`, or null when it is `false`. */
export function routeSettings (defaults: Settings, config: unknown, route: string): Settings | null {
  if (config === false) return null
  if (config === undefined) return defaults
  const where = `config.digest of ${route}`
  checkObject(where, config)
  checkKeys(where, config, routeOnlyKeys)
  return build(where, config, defaults, defaults.typeBase)
}
