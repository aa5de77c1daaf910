// A loopback reverse proxy that adds `Authorization: Bearer <token>` to every request and changes
// nothing else, so the MCP conformance suite can test the daemon's token-protected endpoints.
//
// Why: `conformance server` (0.1.x) takes only `--url` and has no way to send a request header
// (modelcontextprotocol/conformance#453); the daemon answers 401 to anything without a token.
//
// Transparent on purpose: the method, path, query, headers (Host and Origin included, so the
// dns-rebinding-protection scenario reaches the daemon's own Host check unchanged) and body go
// through as sent, and the answer comes back as it streams (Server-Sent Events are not buffered).
// Hop-by-hop headers are the only ones dropped. An Authorization header the client sent wins (the
// suite never sends one).
//
// Usage: CAIRN_PROXY_TARGET=http://127.0.0.1:PORT CAIRN_PROXY_TOKEN_FILE=<home>/auth/operator.token \
//          node auth-proxy.mjs
// The token is read from the file, never from the command line. Prints one line,
// `{"url":"http://127.0.0.1:P"}`, once it listens; exits on SIGTERM or SIGINT.

import http from 'node:http';
import { readFileSync } from 'node:fs';

const target = new URL(process.env.CAIRN_PROXY_TARGET ?? '');
const token = readFileSync(process.env.CAIRN_PROXY_TOKEN_FILE ?? '', 'utf8').trim();
if (target.protocol !== 'http:' || !token) {
  console.error('auth-proxy: set CAIRN_PROXY_TARGET (http://…) and CAIRN_PROXY_TOKEN_FILE');
  process.exit(2);
}

const HOP_BY_HOP = new Set([
  'connection', 'keep-alive', 'proxy-authenticate', 'proxy-authorization', 'te', 'trailer',
  'transfer-encoding', 'upgrade',
]);

function forwardable(headers) {
  const out = {};
  for (const [name, value] of Object.entries(headers)) {
    if (!HOP_BY_HOP.has(name.toLowerCase())) out[name] = value;
  }
  return out;
}

const agent = new http.Agent({ keepAlive: true });

const server = http.createServer((req, res) => {
  const headers = forwardable(req.headers);
  headers.authorization ??= `Bearer ${token}`;
  const upstream = http.request(
    {
      host: target.hostname,
      port: target.port,
      method: req.method,
      path: req.url,
      headers, // `host` included: the daemon sees the Host the client sent
      agent,
    },
    (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.statusMessage, forwardable(answer.headers));
      res.flushHeaders();
      answer.pipe(res);
      answer.on('error', () => res.destroy());
    },
  );
  upstream.on('error', (e) => {
    if (!res.headersSent) {
      res.writeHead(502, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { code: 'proxy', message: `auth-proxy: ${e.message}` } }));
    } else {
      res.destroy();
    }
  });
  // The client went away (e.g. it closed an SSE stream): close the daemon's side too.
  res.on('close', () => {
    if (!res.writableFinished) upstream.destroy();
  });
  req.pipe(upstream);
});

server.listen(0, '127.0.0.1', () => {
  console.log(JSON.stringify({ url: `http://127.0.0.1:${server.address().port}` }));
});
for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => {
    server.closeAllConnections();
    server.close(() => process.exit(0));
  });
}
