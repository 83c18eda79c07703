'use strict';
// npm redlock 5 on one Redis server, as its users run it: redlock.using(),
// which extends the lock automatically while the routine runs and aborts
// its signal when an extension fails. redlock gives no fencing token.
const Redis = require('ioredis');
const { default: Redlock, ExecutionError } = require('redlock');
const { run, WorkerError } = require('./locksuite-worker');
const version = require('./version');

let redis, redlock, key, leaseMs, lost;
let held = null; // the lease in its using() routine: { lease, signal, finish, done }
let n = 0;

run({
  library: 'redlock',
  version: version('redlock'),
  capabilities: ['ttl', 'lost'],
  async init(msg, lostFn) {
    ({ key, lease_ms: leaseMs } = msg);
    lost = lostFn;
    // commandTimeout: a blackholed connection fails its command instead of
    // hanging the worker.
    redis = new Redis(msg.url, { username: msg.username || undefined, password: msg.password || undefined,
      maxRetriesPerRequest: 1, connectTimeout: 1000, commandTimeout: 1000 });
    redis.on('error', (e) => console.error('ioredis:', e.message));
    // The extension threshold: redlock's default (500 ms before expiry)
    // where the lease allows it, else the largest using() accepts.
    redlock = new Redlock([redis], { automaticExtensionThreshold: Math.min(500, leaseMs - 100) });
    redlock.on('error', (e) => console.error('redlock:', e.message));
    return { ttl_ms: leaseMs, expiry_ms: leaseMs }; // Redis frees a PX key on time
  },
  acquire(timeoutMs) {
    // Tries every 200 ms (redlock's retryDelay) until timeoutMs.
    const settings = { retryCount: Math.floor(timeoutMs / 200) };
    const lease = `l${++n}`;
    let finish;
    const released = new Promise((r) => { finish = r; });
    return new Promise((resolve, reject) => {
      const done = redlock.using([key], leaseMs, settings, async (signal) => {
        signal.addEventListener('abort', () => lost(lease, `redlock: ${signal.error && signal.error.message}`));
        held = { lease, signal, finish, done };
        resolve({ lease, fence: 0 });
        await released;
      });
      done.catch((e) => {
        if (held && held.lease === lease) return; // release() awaits it
        const code = e instanceof ExecutionError ? 'timeout' : 'unavailable';
        reject(new WorkerError(code, `redlock: ${e.message}`));
      });
    });
  },
  async release(lease) {
    if (!held || held.lease !== lease) return false; // released before
    const { signal, finish, done } = held;
    const aborted = signal.aborted;
    finish();
    try {
      await done; // using() releases when its routine ends
      return !aborted;
    } catch (e) {
      return false; // its release found the key gone, or another's
    } finally {
      held = null;
    }
  },
  async close() {
    if (held) held.finish();
    held = null;
    await redis.quit().catch(() => {});
  },
});
