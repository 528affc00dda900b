// The ES module entry of fastify-digest-fields/client: it re-exports the CommonJS build, as the
// main entry does, so that `import` and `require` share one set of classes.
export * from './client.js'
