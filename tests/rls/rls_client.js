// SPDX-License-Identifier: MIT
// A real gRPC client for divvyd's RLS listener (tests/integration/test_rls.c):
// @grpc/grpc-js with @grpc/proto-loader, loading divvy's proto/ files (the
// same ones divvyd is generated from).  Usage:
//   node rls_client.js PROTO_DIR ADDRESS < job.json
// ADDRESS is grpc-js's ("127.0.0.1:8081", "unix:/path").  job.json:
//   { "calls": [ RateLimitRequest, ... ], "repeat": N, "deadline_ms": D }
// or, for gRPC health checking (grpc/health/v1/health.proto), with
// "health": "Check" or "Watch", calls are HealthCheckRequests; a Watch
// result is its first message (the call is then cancelled) or its error.
// Every call (each repeated N times) is started at once on one channel, so
// they run as concurrent streams of one HTTP/2 connection.  Prints one JSON
// array: per call, { "ok": true, "resp": RateLimitResponse } or
// { "ok": false, "code": grpc status, "details": text }.
'use strict';
const path = require('path');
const grpc = require('@grpc/grpc-js');
const loader = require('@grpc/proto-loader');

const [protoDir, address] = process.argv.slice(2);
const def = loader.loadSync(['envoy/service/ratelimit/v3/rls.proto',
                             'grpc/health/v1/health.proto'], {
  includeDirs: [path.resolve(protoDir)],
  keepCase: true, longs: String, enums: String, defaults: true, oneofs: true,
});
const pkg = grpc.loadPackageDefinition(def);
const Service = pkg.envoy.service.ratelimit.v3.RateLimitService;
const Health = pkg.grpc.health.v1.Health;

let input = '';
process.stdin.on('data', (d) => { input += d; });
process.stdin.on('end', () => {
  const job = JSON.parse(input);
  const client = new (job.health ? Health : Service)(address,
                                                     grpc.credentials.createInsecure());
  const calls = [];
  for (let r = 0; r < (job.repeat || 1); r++)
    for (const c of job.calls) calls.push(c);
  const results = new Array(calls.length);
  let left = calls.length;
  calls.forEach((req, i) => {
    const opts = {};
    if (job.deadline_ms) opts.deadline = new Date(Date.now() + job.deadline_ms);
    const done = (err, resp) => {
      if (results[i]) return;
      results[i] = err ? { ok: false, code: err.code, details: err.details }
                       : { ok: true, resp };
      if (--left === 0) {
        process.stdout.write(JSON.stringify(results) + '\n');
        client.close();
      }
    };
    if (job.health === 'Watch') {
      const call = client.Watch(req, opts);
      call.on('data', (resp) => { done(null, resp); call.cancel(); });
      call.on('error', (err) => done(err));
    } else if (job.health) {
      client.Check(req, opts, done);
    } else {
      client.ShouldRateLimit(req, opts, done);
    }
  });
});
