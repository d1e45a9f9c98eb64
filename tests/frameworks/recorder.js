// A recording upstream on Node's own `http` module, with Node's defaults: tests/differential.rs
// puts it behind `opbound serve` and compares what it saw with what opbound counted.
//
// `node recorder.js PORT` listens on 127.0.0.1:PORT and prints a line starting with `ready` once
// it accepts connections. Every request is recorded when its head arrives (method, target,
// version, the framing fields) and again when its body has ended (length and SHA-256), so a
// request whose body never ended is seen too. It is answered with a JSON echo of the same facts,
// by which a client tells its response from another's. A WebSocket upgrade is answered 101 and
// its bytes echoed back raw. `GET /_seen` lists the records as JSON and `DELETE /_seen` empties
// the list; neither is recorded.
'use strict';

const crypto = require('crypto');
const http = require('http');

let seen = [];

function record(req) {
  const entry = {
    method: req.method,
    target: req.url,
    version: req.httpVersion,
    content_length: req.headers['content-length'] ?? null,
    transfer_encoding: req.headers['transfer-encoding'] ?? null,
    upgrade: req.headers.upgrade ?? null,
    complete: false,
    length: 0,
    sha256: null,
  };
  seen.push(entry);
  return entry;
}

function echo(entry) {
  const { method, target, length, sha256 } = entry;
  return JSON.stringify({ upstream: 'node', method, target, length, sha256 });
}

const server = http.createServer((req, res) => {
  if (req.url === '/_seen') {
    if (req.method === 'DELETE') {
      seen = [];
      res.statusCode = 204;
      res.end();
    } else {
      res.setHeader('Content-Type', 'application/json');
      res.end(JSON.stringify(seen));
    }
    return;
  }
  const entry = record(req);
  const hash = crypto.createHash('sha256');
  req.on('data', (chunk) => {
    entry.length += chunk.length;
    hash.update(chunk);
  });
  req.on('end', () => {
    entry.complete = true;
    entry.sha256 = hash.digest('hex');
    res.setHeader('Content-Type', 'application/json');
    res.end(echo(entry));
  });
});

// Only WebSocket is switched to: the accept key is computed as RFC 6455 says, and the tunnel
// echoes bytes as they come, which is all a proxy in between can see of it.
server.on('upgrade', (req, socket, head) => {
  const entry = record(req);
  entry.complete = true;
  entry.sha256 = crypto.createHash('sha256').digest('hex');
  socket.on('error', () => {});
  if (String(req.headers.upgrade).toLowerCase() !== 'websocket') {
    const body = echo(entry);
    socket.end(`HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
    return;
  }
  const accept = crypto
    .createHash('sha1')
    .update(`${req.headers['sec-websocket-key']}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`)
    .digest('base64');
  socket.write(
    `HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n\r\n`,
  );
  if (head.length > 0) {
    socket.write(head);
  }
  socket.pipe(socket);
});

// Longer than a test runs: an idle connection the recorder closed would race opbound's next
// request on it, which is not what this upstream is for.
server.keepAliveTimeout = 60000;

const port = Number(process.argv[2]);
server.listen(port, '127.0.0.1', () => console.log(`ready node http on 127.0.0.1:${port}`));
