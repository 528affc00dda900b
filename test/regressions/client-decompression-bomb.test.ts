import { createServer } from 'node:http'
import { brotliCompressSync, constants as zlib } from 'node:zlib'
import t from 'tap'
import { Agent, request } from 'undici'
import { digestInterceptor } from '../../lib/client.js'
import { member, serving } from '../helpers.js'

// What the attack on issue 25 found of the client, pinned: checking a coded response's
// Unencoded-Digest decodes it only up to maxDecodedBody.

t.test('the client no longer decodes a decompression bomb without bound', async (t) => {
  const decoded = Buffer.alloc(64 * 1024 * 1024)
  const bomb = brotliCompressSync(decoded, { params: { [zlib.BROTLI_PARAM_QUALITY]: 5 } })
  const small = Buffer.alloc(1024 * 1024, 'a')
  const coded = brotliCompressSync(small)
  const origin = await serving(t, createServer((req, res) => {
    const [body, unencoded] = req.url === '/bomb' ? [bomb, decoded] : req.url === '/wrong' ? [coded, Buffer.from('other')] : [coded, small]
    res.writeHead(200, { 'content-encoding': 'br', 'unencoded-digest': member('sha-256', unencoded), 'content-length': body.length })
    res.end(body)
  }))
  const strict = new Agent().compose(digestInterceptor({ unverifiable: 'require', maxDecodedBody: 8 * 1024 * 1024 }))
  t.teardown(() => strict.close())
  const bombed = await request(`${origin}/bomb`, { dispatcher: strict })
  const error = await bombed.body.arrayBuffer().then(() => null, (error: Error) => error)
  t.match(error, { name: 'DigestUnverifiableError' }, 'unverifiable, not decoded to its end')
  t.match(error?.message, /more than 8388608 bytes/)
  const relaxed = new Agent().compose(digestInterceptor())
  t.teardown(() => relaxed.close())
  const ignored = await request(`${origin}/bomb`, { dispatcher: relaxed })
  t.equal(Buffer.from(await ignored.body.arrayBuffer()).length, bomb.length, 'with unverifiable: ignore, the body as sent')
  const honest = await request(`${origin}/small`, { dispatcher: strict })
  t.equal(Buffer.from(await honest.body.arrayBuffer()).length, coded.length, 'a body within the bound is checked')
  const lying = await request(`${origin}/wrong`, { dispatcher: strict })
  await t.rejects(lying.body.arrayBuffer(), { name: 'DigestMismatchError' }, 'and a wrong one still fails')
})
