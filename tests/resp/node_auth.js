// SPDX-License-Identifier: MIT
// AUTH on divvyd's RESP listener from node-redis and ioredis
// (tests/integration/test_resp_clients.c): node node_auth.js SOCKET PASSWORD.
// Each client, with its defaults, connects with the right password and hits;
// with a wrong one it is refused (WRONGPASS); with none, its commands are
// refused (NOAUTH).  Prints one line per check; exit 0 when all pass.
'use strict';
const { fail, ok, same } = require('./check');
const { createClient } = require('redis');
const Redis = require('ioredis');

const [path, password] = process.argv.slice(2);
const refused = async (what, p, want) => {
  try {
    await p;
    fail(`${what}: accepted`);
  } catch (e) {
    if (String(e && e.message).startsWith(want))
      ok(what);
    else
      fail(`${what}: ${e && e.message}`);
  }
};

const nodeRedis = (pass) => {
  const c = createClient({ socket: { path, reconnectStrategy: false }, password: pass });
  c.on('error', () => {});
  return c;
};
const ioredis = (pass) => new Redis({ path, password: pass, maxRetriesPerRequest: 0,
                                       retryStrategy: () => null, lazyConnect: true });

async function main() {
  let c = nodeRedis(password);
  await c.connect();
  same('node-redis right password', await c.sendCommand(['DIVVY.HIT', 'app', 'auth-nr']),
       [1, 2, 60, 'r1']);
  c.destroy();
  c = nodeRedis('wrong');
  await refused('node-redis wrong password', c.connect(), 'WRONGPASS');
  c = nodeRedis(undefined);
  await refused('node-redis no password', c.connect(), 'NOAUTH');

  let i = ioredis(password);
  await i.connect();
  same('ioredis right password', await i.call('DIVVY.HIT', 'app', 'auth-io'), [1, 2, 60, 'r1']);
  i.disconnect();
  // ioredis reports a failed handshake as an 'error' event, then closes.
  for (const [what, pass, want] of [['ioredis wrong password', 'wrong', 'WRONGPASS'],
                                    ['ioredis no password', undefined, 'NOAUTH']]) {
    const errors = [];
    i = ioredis(pass);
    i.on('error', (e) => errors.push(e.message));
    await refused(what + ' (connect)', i.connect().then(() => i.call('DIVVY.HIT', 'app', 'x')),
                  '');
    if (errors.some((m) => m.includes(want)))
      ok(what);
    else
      fail(`${what}: errors ${JSON.stringify(errors)}`);
    i.disconnect();
  }
}

main().catch((e) => { fail('exception ' + (e && e.stack ? e.stack : e)); });
