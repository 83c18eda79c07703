'use strict';
// npm redis-semaphore's Mutex on one Redis server, as it ships: a key
// "mutex:" + key set with PX lockTimeout, refreshed every 0.8 × lockTimeout
// while held, and onLockLost called when a refresh finds it gone. It gives
// no fencing token.
const Redis = require('ioredis');
const { Mutex, TimeoutError } = require('redis-semaphore');
const { run, WorkerError } = require('./locksuite-worker');
const version = require('./version');

let redis, key, leaseMs, lost;
let held = null; // { lease, mutex }
let n = 0;

run({
  library: 'redis-semaphore',
  version: version('redis-semaphore'),
  capabilities: ['ttl', 'lost'],
  async init(msg, lostFn) {
    ({ key, lease_ms: leaseMs } = msg);
    lost = lostFn;
    redis = new Redis(msg.url, { username: msg.username || undefined, password: msg.password || undefined,
      maxRetriesPerRequest: 1, connectTimeout: 1000, commandTimeout: 1000 });
    redis.on('error', (e) => console.error('ioredis:', e.message));
    return { ttl_ms: leaseMs, expiry_ms: leaseMs }; // Redis frees a PX key on time
  },
  async acquire(timeoutMs) {
    const lease = `m${++n}`;
    const mutex = new Mutex(redis, key, { lockTimeout: leaseMs, acquireTimeout: timeoutMs,
      onLockLost: (e) => lost(lease, `redis-semaphore: ${e.message}`) });
    try {
      await mutex.acquire();
    } catch (e) {
      const code = e instanceof TimeoutError ? 'timeout' : 'unavailable';
      throw new WorkerError(code, `redis-semaphore: ${e.message}`);
    }
    held = { lease, mutex };
    return { lease, fence: 0 };
  },
  async release(lease) {
    if (!held || held.lease !== lease) return false; // released before
    const { mutex } = held;
    // Its release is a compare-and-delete that does not say whether it
    // deleted: whether the key was still this mutex's is read just before.
    let mine;
    try {
      mine = (await redis.get(`mutex:${key}`)) === mutex.identifier;
      await mutex.release();
    } catch (e) {
      throw new WorkerError('unavailable', `redis-semaphore: ${e.message}`);
    }
    held = null;
    return mine;
  },
  async close() {
    if (held) await held.mutex.release().catch(() => {});
    held = null;
    await redis.quit().catch(() => {});
  },
});
