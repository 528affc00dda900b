// The cause "stream-trailers" of .ci/fastify-6.json, without the plugin: a route that sets a trailer
// with Fastify's own reply.trailer() and sends a stream, and one that sends a Buffer. Prints what a
// client received of each; the stream's trailer is missing while the fault is there.
import { Readable } from 'node:stream'
import Fastify from 'fastify'
import { request } from 'undici'

const app = Fastify()
app.get('/:payload', (req, reply) => {
  reply.trailer('x-check', async () => 'sent')
  const bytes = Buffer.from('content')
  reply.send(req.params.payload === 'stream' ? Readable.from([bytes]) : bytes)
})
const origin = await app.listen({ host: '127.0.0.1', port: 0 })
for (const payload of ['stream', 'buffer']) {
  const response = await request(`${origin}/${payload}`)
  await response.body.dump()
  console.log(`# Fastify ${app.version}, a ${payload} payload: Trailer: ${response.headers.trailer}, trailers received: ${JSON.stringify(response.trailers)}`)
}
await app.close()
