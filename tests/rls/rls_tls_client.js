// SPDX-License-Identifier: MIT
// A real gRPC client over TLS for divvyd's "rls:tls:" listener
// (tests/integration/test_tls.c): @grpc/grpc-js's TLS credentials, which
// require ALPN "h2" from the server.  Usage:
//   node rls_tls_client.js PROTO_DIR ADDRESS CA_FILE [CERT_FILE KEY_FILE] < request.json
// ADDRESS is grpc-js's ("127.0.0.1:8443"); CA_FILE verifies divvyd's
// certificate; CERT_FILE and KEY_FILE are a client certificate (mTLS).
// Makes one ShouldRateLimit call with the RateLimitRequest on stdin and
// prints { "ok": true, "resp": ... } or { "ok": false, "code": N, "details": text }.
'use strict';
const fs = require('fs');
const path = require('path');
const grpc = require('@grpc/grpc-js');
const loader = require('@grpc/proto-loader');

const [protoDir, address, ca, cert, key] = process.argv.slice(2);
const def = loader.loadSync('envoy/service/ratelimit/v3/rls.proto', {
  includeDirs: [path.resolve(protoDir)],
  keepCase: true, longs: String, enums: String, defaults: true, oneofs: true,
});
const pkg = grpc.loadPackageDefinition(def);
const Service = pkg.envoy.service.ratelimit.v3.RateLimitService;

let input = '';
process.stdin.on('data', (d) => { input += d; });
process.stdin.on('end', () => {
  const creds = grpc.credentials.createSsl(fs.readFileSync(ca),
    key ? fs.readFileSync(key) : null, cert ? fs.readFileSync(cert) : null);
  const client = new Service(address, creds);
  client.ShouldRateLimit(JSON.parse(input), { deadline: new Date(Date.now() + 10000) },
    (err, resp) => {
      process.stdout.write(JSON.stringify(err ? { ok: false, code: err.code, details: err.details }
                                              : { ok: true, resp }) + '\n');
      client.close();
    });
});
