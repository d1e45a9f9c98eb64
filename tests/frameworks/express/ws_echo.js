// A WebSocket echo server on Node's `http` and the `ws` package, the way a Node app serves
// WebSockets: tests/fair_share.rs puts it behind `opbound serve` to hold tunnels open.
//
// `node ws_echo.js PORT` listens on 127.0.0.1:PORT and prints a line starting with `ready` once
// it accepts connections. Every WebSocket message is sent back as it came. `GET /_open` answers
// how many WebSocket connections are open; any other plain request answers `ok`.
'use strict';

const http = require('http');
const { WebSocketServer } = require('ws');

const port = Number(process.argv[2]);
let open = 0;

const server = http.createServer((req, res) => {
  res.setHeader('Content-Type', 'text/plain');
  res.end(req.url === '/_open' ? `${open}\n` : `ok ${req.url}\n`);
});
const wss = new WebSocketServer({ server });
wss.on('connection', (ws) => {
  open += 1;
  ws.on('message', (data, isBinary) => ws.send(data, { binary: isBinary }));
  ws.on('close', () => {
    open -= 1;
  });
  ws.on('error', () => {});
});
server.listen(port, '127.0.0.1', () => console.log(`ready ${port}`));
