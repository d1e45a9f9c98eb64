// An Express app, on Express's defaults, that records which route ran and with what key value.
//
// tests/frameworks.rs starts it behind `opbound serve`: `node app.js PORT`. It listens on
// 127.0.0.1:PORT and prints a line starting with `ready` once it accepts connections.
// `GET /_ran` lists the records as JSON and `DELETE /_ran` empties the list. `.ci/test` runs
// `npm ci` here when node_modules is missing.
'use strict';

const express = require('express');
const cookieParser = require('cookie-parser');
const basicAuth = require('basic-auth');

const app = express();
app.use(cookieParser());
let ran = [];

function record(req, res, route, key, params) {
  // opbound appends the peer it saw to X-Forwarded-For: the last entry is the client.
  const forwarded = req.get('X-Forwarded-For') || '';
  const address = forwarded.split(',').pop().trim() || null;
  ran.push({ route, key: key === undefined ? null : key, address, params: params || {} });
  res.type('text/plain').send(`ran ${route}\n`);
}

app.get('/api/limited', (req, res) => record(req, res, 'limited'));
app.get('/api/items/:id', (req, res) => record(req, res, 'items', null, { id: req.params.id }));
app.get('/api/items/:id/parts/:part', (req, res) =>
  record(req, res, 'parts', null, { id: req.params.id, part: req.params.part }),
);
app.get('/api/session', (req, res) => record(req, res, 'session', req.cookies.sid));
app.get('/api/search', (req, res) => {
  // A repeated parameter comes as an array; what the app would use is its string.
  const key = req.query.key;
  record(req, res, 'search', key === undefined ? null : String(key));
});
app.get('/api/keyed', (req, res) => record(req, res, 'keyed', req.get('X-Api-Key')));
app.get('/api/token', (req, res) => {
  // What Express apps use: the basic-auth package for Basic, and passport-http-bearer's reading
  // of Bearer (a case-insensitive scheme, a space, the token).
  const basic = basicAuth(req);
  if (basic) {
    return record(req, res, 'token', basic.name, { scheme: 'basic' });
  }
  const parts = (req.get('Authorization') || '').split(' ');
  const bearer = parts.length === 2 && /^Bearer$/i.test(parts[0]) ? parts[1] : null;
  record(req, res, 'token', bearer, { scheme: bearer === null ? null : 'bearer' });
});

// Many apps read the body as JSON whatever its Content-Type says.
app.post('/api/login', express.json({ type: () => true }), (req, res) => {
  const name = req.body && req.body.username;
  record(req, res, 'login', typeof name === 'string' ? name : null);
});

app.get('/_ran', (req, res) => res.json(ran));
app.delete('/_ran', (req, res) => {
  ran = [];
  res.status(204).end();
});

const port = Number(process.argv[2]);
app.listen(port, '127.0.0.1', () => {
  console.log(`ready express on 127.0.0.1:${port}`);
});
