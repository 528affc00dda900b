// The example server's progress 104s (draft-ietf-httpbis-resumable-upload-15 sections 4.2.2 and
// 4.4.2): while an append's content arrives, a client of interop version 9 hears the offset kept so
// far, on a Node that can send a 104 (24.21, 26.10); the offset told is never taken back, even when
// the client leaves right after. Elsewhere no 104 goes, and the bytes written are kept all the same.
import { once } from 'node:events'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { connect } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import type { FastifyInstance } from 'fastify'
import { request } from 'undici'
import { listen, seededBytes } from '../helpers.js'

const example = await import('../../examples/resumable-upload-server.js' as string) as {
  buildServer: (options: { uploadDir: string, logger: boolean, progressEveryMs: number }) => Promise<FastifyInstance>
  canSend104: boolean
}

t.test('an append half sent: the offset told in a 104 is kept when the client leaves', async (t) => {
  const uploadDir = mkdtempSync(join(tmpdir(), 'resumable-progress-'))
  t.teardown(() => rmSync(uploadDir, { recursive: true, force: true }))
  const app = await example.buildServer({ uploadDir, logger: false, progressEveryMs: 20 })
  t.teardown(async () => await app.close())
  const port = await listen(app)
  const data = seededBytes(400_000, 21)
  const created = await request(`http://127.0.0.1:${port}/resumable`, { method: 'POST', headers: { 'upload-complete': '?0' }, body: data.subarray(0, 1000) })
  await created.body.dump()
  const location = created.headers.location as string
  const socket = connect({ host: '127.0.0.1', port })
  socket.on('error', () => {})
  await once(socket, 'connect')
  let received = ''
  const told: number[] = []
  // Resolves with the offsets of the 104s once one is heard, or with none once the connection closes.
  const heard = new Promise<void>((resolve) => {
    socket.on('data', (chunk: Buffer) => {
      received += chunk.toString('latin1')
      for (const match of received.matchAll(/HTTP\/1\.1 104[^\r]*\r\n((?:[^\r]+\r\n)*)\r\n/g)) {
        t.notMatch(match[1], /^location:/im, 'no Location in a 104 of an append')
        told.push(Number(/^upload-offset: (\d+)/im.exec(match[1] as string)?.[1]))
      }
      received = received.replace(/HTTP\/1\.1 104[^\r]*\r\n(?:[^\r]+\r\n)*\r\n/g, '')
      if (told.length > 0) resolve()
    })
    socket.once('close', resolve)
  })
  const sent = 200_000
  socket.write([`PATCH ${location} HTTP/1.1`, 'Host: localhost', 'Content-Type: application/partial-upload', 'Upload-Draft-Interop-Version: 9',
    'Upload-Offset: 1000', 'Upload-Complete: ?1', `Content-Length: ${data.length - 1000}`, '', ''].join('\r\n'))
  socket.write(data.subarray(1000, 1000 + sent))
  if (example.canSend104) {
    await heard
    t.ok(told.length > 0 && told.every((offset, i) => offset > 1000 && offset <= 1000 + sent && offset >= (told[i - 1] ?? 0)),
      `104s told ${told.join(', ')}: within what was sent, never decreasing`)
  }
  socket.destroy()
  await heard
  const head = await request(`http://127.0.0.1:${port}${location}`, { method: 'HEAD' })
  const offset = Number(head.headers['upload-offset'])
  t.ok(offset >= Math.max(1000, ...told) && offset <= 1000 + sent, `the offset is ${offset}: what was told, or more, is kept`)
  t.ok(readFileSync(join(uploadDir, `${location.split('/').pop() as string}.part`)).equals(data.subarray(0, offset)), 'and the file is the bytes sent up to it')
  if (!example.canSend104) t.same(told, [], 'where Node cannot send a 104, none went')
})
