'use strict';
// npm redis-semaphore's Mutex on one Redis server, as it ships: the key
// "mutex:" + key (the library's prefix), set with PX lockTimeout, refreshed
// every 0.8 × lockTimeout while held, and onLockLost called when a refresh
// finds it gone. It has no fencing token.
const { Mutex, TimeoutError } = require('redis-semaphore');
const { delIfEqualLua } = require('redis-semaphore/lib/mutex/release');
const { WorkerError } = require('./locksuite-worker');
const { runRedis } = require('./redis-client');

let redis, key, leaseMs, lost;
let held = null; // { lease, mutex }
let n = 0;

runRedis({
  library: 'redis-semaphore',
  init(client, k, ms, lostFn) {
    [redis, key, leaseMs, lost] = [client, k, ms, lostFn];
  },
  async acquire(timeoutMs) {
    const lease = `m${++n}`;
    const mutex = new Mutex(redis, key, { lockTimeout: leaseMs, acquireTimeout: timeoutMs,
      onLockLost: (e) => { if (held && held.lease === lease) lost(lease, `redis-semaphore: ${e.message}`); } });
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
    // mutex.release() runs delIfEqualLua, a compare-and-delete that returns
    // whether it deleted, but drops that answer: the worker stops the
    // refresh as release() does and runs the same script itself.
    mutex.stopRefresh();
    let deleted;
    try {
      deleted = Number(await delIfEqualLua(redis, [`mutex:${key}`, mutex.identifier])) === 1;
    } catch (e) {
      throw new WorkerError('unavailable', `redis-semaphore: ${e.message}`);
    } finally {
      held = null;
    }
    return deleted;
  },
  async close() {
    if (held) await held.mutex.release().catch(() => {});
    held = null;
  },
});
