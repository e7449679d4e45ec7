// SPDX-License-Identifier: MIT
// What the node scripts of divvy's RESP tests share: one line per check,
// "ok WHAT" or "FAIL WHAT: ...", and exit code 1 once anything failed.
'use strict';

const fail = (what) => { console.log('FAIL ' + what); process.exitCode = 1; };
const ok = (what) => console.log('ok ' + what);
const same = (what, got, want) => {
  if (JSON.stringify(got) !== JSON.stringify(want))
    fail(`${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
  else
    ok(what);
};

module.exports = { fail, ok, same };
