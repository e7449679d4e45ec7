// SPDX-License-Identifier: MIT
// divvyd's RESP listener from ioredis (tests/integration/test_resp_clients.c):
// node node_client.js SOCKET.  Connects as any Redis client would (ioredis's
// ready check sends INFO), pipelines DIVVY.HIT, reproduces Smyte's RL.REDUCE
// transcript and a CL.THROTTLE, runs a multi() transaction, then 4 clients x
// 250 hits on a rule that allows 700 must get exactly 700.  Prints one line
// per check; exit 0 when all pass.
'use strict';
const { fail, same } = require('./check');
const Redis = require('ioredis');

const path = process.argv[2];
const open = () => new Redis({ path, maxRetriesPerRequest: 0, enableOfflineQueue: true,
                               retryStrategy: () => null });

async function main() {
  const r = open();
  same('PING', await r.ping(), 'PONG');

  const p = r.pipeline();
  for (let i = 0; i < 5; i++) p.call('DIVVY.HIT', 'app', 'node');
  const replies = (await p.exec()).map(([err, v]) => (err ? err.message : v));
  same('pipelined DIVVY.HIT', replies, [[1, 2, 60, 'r1'], [1, 1, 60, 'r1'], [1, 0, 60, 'r1'],
                                         [0, 0, 60, 'r1'], [0, 0, 60, 'r1']]);

  const t = [];
  for (let i = 0; i < 3; i++) t.push(await r.call('RL.REDUCE', 'TwoPerMin', '2', '60'));
  same('RL.REDUCE TwoPerMin 2 60 x3', t, [2, 1, 0]);
  same('CL.THROTTLE', await r.call('CL.THROTTLE', 'user123', '15', '30', '60', '1'),
       [0, 16, 15, -1, 2]);
  // multi(): MULTI, the commands (+QUEUED each), EXEC and its array.
  const m = await r.multi().call('DIVVY.HIT', 'app', 'multi').ping()
    .call('RL.REDUCE', 'TwoPerMin', '2', '60').exec();
  same('multi() DIVVY.HIT PING RL.REDUCE', m, [[null, [1, 2, 60, 'r1']], [null, 'PONG'],
                                                [null, 0]]);
  try {
    await r.call('NOPE');
    fail('unknown command answered');
  } catch (e) {
    same('unknown command', e.message, "ERR unknown command 'NOPE'");
  }

  // Concurrency: 4 connections, 250 hits each, pipelined.
  const clients = [open(), open(), open(), open()];
  const counts = await Promise.all(clients.map(async (c) => {
    const q = c.pipeline();
    for (let i = 0; i < 250; i++) q.call('DIVVY.HIT', 'bulk', 'node');
    const res = await q.exec();
    return res.filter(([err, v]) => !err && v[0] === 1).length;
  }));
  same('4 x 250 DIVVY.HIT allowed', counts.reduce((a, b) => a + b, 0), 700);
  for (const c of clients) c.disconnect();
  same('QUIT', await r.quit(), 'OK');
}

main().catch((e) => { fail('exception ' + (e && e.stack ? e.stack : e)); });
