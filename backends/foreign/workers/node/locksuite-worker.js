'use strict';
// The worker side of locksuite's worker protocol (docs/protocol.md), for Node.
//
//   const { run, version, WorkerError } = require('./locksuite-worker');
//   run({
//     library: 'my-lock', version: version('my-lock'), capabilities: ['ttl'],
//     async init(msg, lost) { /* connect to msg.url */ return { ttl_ms: msg.lease_ms, expiry_ms: msg.lease_ms }; },
//     async acquire(timeoutMs) { return { lease: 'a1', fence: 0 }; }, // or throw new WorkerError('timeout', text)
//     async release(lease) { return true; }, // whether it was still this lease's
//     async cleanup() {}, async close() {},
//   });
//
// Requests are handled one at a time, in order; lost(lease, text) sends a
// lost notice at any time. A thrown error is an error reply: its .code
// (default crash) and .definite (default false).
const fs = require('node:fs');
const path = require('node:path');
const readline = require('node:readline');

const PROTOCOL = 1;
const CODES = new Set(['timeout', 'unavailable', 'not-held', 'unsupported', 'malformed', 'crash']);

class WorkerError extends Error {
  constructor(code, text, definite = false) {
    super(text);
    this.code = code;
    this.definite = definite;
  }
}

// version(pkg) is the installed version of npm package pkg, from its own
// package.json (which its "exports" may keep require() from reaching).
function version(pkg) {
  const file = path.join(__dirname, 'node_modules', pkg, 'package.json');
  return JSON.parse(fs.readFileSync(file, 'utf8')).version.replace(/^v/, '');
}

function send(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

async function handle(w, msg) {
  switch (msg.type) {
    case 'init': {
      if (msg.protocol !== PROTOCOL) {
        throw new WorkerError('unsupported', `protocol ${msg.protocol}: this worker speaks ${PROTOCOL}`, true);
      }
      const lost = (lease, text) => send({ type: 'lost', lease, text });
      const { ttl_ms = 0, expiry_ms = 0 } = (await w.init(msg, lost)) || {};
      return { type: 'init_ok', library: w.library, version: w.version, runtime: `Node ${process.version}`,
        capabilities: w.capabilities || [], ttl_ms, expiry_ms };
    }
    case 'acquire': {
      const { lease, fence = 0 } = await w.acquire(msg.timeout_ms);
      return { type: 'acquire_ok', lease, fence };
    }
    case 'release':
      return { type: 'release_ok', held: Boolean(await w.release(msg.lease)) };
    case 'cleanup':
      if (w.cleanup) await w.cleanup();
      return { type: 'cleanup_ok' };
    case 'close':
      if (w.close) await w.close();
      return { type: 'close_ok' };
    default:
      throw new WorkerError('unsupported', `request type ${JSON.stringify(msg.type)}`, true);
  }
}

// run serves the requests of standard input; when it ends, the worker
// exits 0 once the lines already read are answered (at once if none wait).
function run(w) {
  // A library's failed timer (a renewal on a cut connection) is logged, not fatal.
  process.on('unhandledRejection', (e) => console.error('unhandled rejection:', e));
  process.stdout.on('error', () => process.exit(0)); // the suite is gone
  const queue = [];
  let busy = false;
  let ended = false;
  const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  lines.on('line', (line) => {
    queue.push(line);
    if (!busy) next();
  });
  lines.on('close', () => {
    ended = true;
    if (queue.length === 0) process.exit(0);
  });
  async function next() {
    busy = true;
    while (queue.length > 0) {
      const line = queue.shift();
      let msg;
      try {
        msg = JSON.parse(line);
        if (typeof msg !== 'object' || msg === null) throw new Error('not a JSON object');
      } catch (e) {
        send({ type: 'error', code: 'malformed', definite: true, text: `${e.message}: ${line.slice(0, 200)}` });
        continue;
      }
      let reply;
      try {
        reply = await handle(w, msg);
      } catch (e) {
        if (!(e instanceof WorkerError)) console.error(e);
        const code = CODES.has(e && e.code) ? e.code : 'crash'; // not a system error's ECONNREFUSED
        reply = { type: 'error', code, definite: Boolean(e && e.definite), text: String((e && e.message) || e) };
      }
      send({ in_reply_to: msg.id, ...reply });
    }
    busy = false;
    if (ended) process.exit(0);
  }
}

module.exports = { run, version, WorkerError };
