// SPDX-License-Identifier: MIT
// divvyd's RESP listener from node-redis (npm "redis", tests/integration/test_resp_clients.c):
// node node_redis_client.js SOCKET.  node-redis connects with its defaults:
// RESP3 (HELLO 3), then CLIENT SETINFO; runs DIVVY.HIT, Smyte's RL.REDUCE
// transcript, CL.THROTTLE and a MULTI/EXEC transaction.  Prints one line per
// check; exit 0 when all pass.
'use strict';
const { fail, same } = require('./check');
const { createClient } = require('redis');

const path = process.argv[2];

async function main() {
  const r = createClient({ socket: { path, reconnectStrategy: false } });
  r.on('error', (e) => fail('client error ' + e.message));
  await r.connect();
  same('PING', await r.ping(), 'PONG');
  same('DIVVY.HIT', await r.sendCommand(['DIVVY.HIT', 'app', 'nr']), [1, 2, 60, 'r1']);
  const t = [];
  for (let i = 0; i < 3; i++) t.push(await r.sendCommand(['RL.REDUCE', 'nrTwoPerMin', '2', '60']));
  same('RL.REDUCE nrTwoPerMin 2 60 x3', t, [2, 1, 0]);
  same('CL.THROTTLE', await r.sendCommand(['CL.THROTTLE', 'nr123', '15', '30', '60', '1']),
       [0, 16, 15, -1, 2]);
  const m = await r.multi().ping().addCommand(['DIVVY.HIT', 'app', 'nr'])
    .addCommand(['RL.REDUCE', 'nrTwoPerMin', '2', '60']).exec();
  same('MULTI/EXEC', m, ['PONG', [1, 1, 60, 'r1'], 0]);
  try {
    await r.sendCommand(['NOPE']);
    fail('unknown command answered');
  } catch (e) {
    same('unknown command', e.message, "ERR unknown command 'NOPE'");
  }
  r.destroy();
}

main().catch((e) => { fail('exception ' + (e && e.stack ? e.stack : e)); });
