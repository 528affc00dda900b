// The ES module entry. It re-exports the CommonJS build rather than being a second build, so that
// `import` and `require` in one application load the plugin once, with one set of its symbols.
export * from './index.js'
export { fastifyDigestFields as default } from './index.js'
