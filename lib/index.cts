// The CommonJS entry: `require('fastify-digest-fields')` is the plugin function, with `default`,
// `fastifyDigestFields` and every public value on it, as an @fastify plugin is; `export =` with a
// namespace of the public types lets `import x = require(...)` type-check. index.mts lists the same.
import api = require('./index.js')

const fastifyDigestFields = Object.assign(api.fastifyDigestFields, api)

declare namespace fastifyDigestFields {
  export type CommittedFiles = api.CommittedFiles
  export type DigestAlgorithm = api.DigestAlgorithm
  export type DigestAlgorithms = api.DigestAlgorithms
  export type DigestDisclosure = api.DigestDisclosure
  export type DigestFieldName = api.DigestFieldName
  export type DigestProblem = api.DigestProblem
  export type DigestProblemDocument = api.DigestProblemDocument
  export type DigestProblemTypes = api.DigestProblemTypes
  export type DigestRouteConfig = api.DigestRouteConfig
  export type DigestRouteOptions = api.DigestRouteOptions
  export type DraftProblemDocument = api.DraftProblemDocument
  export type FastifyDigestFieldsOptions = api.FastifyDigestFieldsOptions
  export type FileDigestsOptions = api.FileDigestsOptions
  export type IntegritySignatures = api.IntegritySignatures
  export type RegisteredProblemDocument = api.RegisteredProblemDocument
  export type ResponseDigestField = api.ResponseDigestField
  export type ResumableUpload = api.ResumableUpload
  export type ResumableUploadOptions = api.ResumableUploadOptions
  export type SavedFile = api.SavedFile
  export type StaticFileDigestsOptions = api.StaticFileDigestsOptions
  export type UploadFields = api.UploadFields
  export type VerifiedDigest = api.VerifiedDigest
  export type VerifiedFiles = api.VerifiedFiles
}
export = fastifyDigestFields
