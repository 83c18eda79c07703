'use strict';
// The worker side of locksuite's worker protocol (docs/protocol.md), for Node.
//
//   const { run, WorkerError } = require('./locksuite-worker');
//   run({
//     library: 'my-lock', version: '1.0.0', capabilities: ['ttl'],
//     async init(msg, lost) { /* connect to msg.url */ return { ttl_ms: msg.lease_ms, expiry_ms: msg.lease_ms }; },
//     async acquire(timeoutMs) { /* ... */ return { lease: 'a1', fence: 0 }; }, // or throw new WorkerError('timeout', ...)
//     async release(lease) { return true; }, // whether it was still this lease's
//   });
//
// Requests are handled one at a time, in order; lost(lease, text) sends a
// lost notice at any time.
const readline = require('node:readline');

const PROTOCOL = 1;

class WorkerError extends Error {
  // code: timeout, unavailable, not-held, unsupported, malformed, crash;
  // definite: the operation certainly did not happen.
  constructor(code, text, definite = false) {
    super(text);
    this.code = code;
    this.definite = definite;
  }
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

// run serves requests from standard input until it ends, then exits 0.
async function run(w) {
  const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of lines) {
    let msg;
    try {
      msg = JSON.parse(line);
    } catch (e) {
      send({ type: 'error', code: 'malformed', definite: true, text: e.message });
      continue;
    }
    let reply;
    try {
      reply = await handle(w, msg);
    } catch (e) {
      if (!(e instanceof WorkerError)) console.error(e);
      reply = { type: 'error', code: e.code || 'crash', definite: Boolean(e.definite), text: String(e.message || e) };
    }
    reply.in_reply_to = msg.id;
    send(reply);
  }
  process.exit(0);
}

module.exports = { run, WorkerError };
