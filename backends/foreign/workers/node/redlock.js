'use strict';
// npm redlock 5 on one Redis server, as its users run it: using(), which
// extends the lock automatically while its routine runs and aborts the
// routine's signal when an extension fails. redlock has no fencing token.
const { default: Redlock, ExecutionError, ResourceLockedError } = require('redlock');
const { WorkerError } = require('./locksuite-worker');
const { runRedis } = require('./redis-client');

let redis, redlock, key, leaseMs, lost;
let held = null; // the lease whose using() routine runs: { lease, signal, finish, done }
let n = 0;

// holds learns from using()'s end whether its release deleted this lock's
// key: an ExecutionError whose script ran and found another value (or
// none) is a lock no longer held; one that never reached Redis is not.
async function holds(done) {
  try {
    await done;
    return true;
  } catch (e) {
    if (e instanceof ExecutionError) {
      const stats = await Promise.all(e.attempts);
      if (stats.some((s) => [...s.votesAgainst.values()].some((err) => err instanceof ResourceLockedError))) return false;
    }
    throw new WorkerError('unavailable', `redlock: ${e.message}`);
  }
}

runRedis({
  library: 'redlock',
  init(client, k, ms, lostFn) {
    [redis, key, leaseMs, lost] = [client, k, ms, lostFn];
    // Extend 500 ms before expiry (redlock's default) when the lease is long, halfway through a short one (using() wants lease - 100 ms at most); driftFactor and retries stay redlock's.
    redlock = new Redlock([redis], { automaticExtensionThreshold: Math.min(500, Math.floor(leaseMs / 2)) });
    redlock.on('error', (e) => { if (!(e instanceof ResourceLockedError)) console.error('redlock:', e.message); });
  },
  acquire(timeoutMs) {
    const lease = `l${++n}`;
    // Tries every 50 ± 10 ms, the last one starting before timeoutMs.
    const settings = { retryDelay: 50, retryJitter: 10, retryCount: Math.max(0, Math.floor(timeoutMs / 60) - 1) };
    return new Promise((resolve, reject) => {
      let state = 'trying'; // then 'held', or 'gave up'
      const giveUp = (e) => {
        if (state !== 'trying') return;
        state = 'gave up';
        reject(e);
      };
      // A try hung on a blackholed connection must not outlast timeoutMs.
      const timer = setTimeout(() => giveUp(new WorkerError('timeout', `redlock: not acquired in ${timeoutMs} ms`)), timeoutMs);
      const done = redlock.using([key], leaseMs, settings, async (signal) => {
        clearTimeout(timer);
        if (state !== 'trying') return; // granted after the timeout reply: using() releases it now
        state = 'held';
        let finish;
        const released = new Promise((r) => { finish = r; });
        signal.addEventListener('abort', () => {
          // The holder is told; the routine (the holder's section) ends when
          // the holder releases, not here: ending it now would delete the key
          // while the holder still works, which no user's routine does.
          if (held && held.lease === lease) lost(lease, `redlock: ${signal.error ? signal.error.message : 'aborted'}`);
        });
        held = { lease, signal, finish, done };
        resolve({ lease, fence: 0 });
        await released;
      });
      done.catch((e) => {
        clearTimeout(timer);
        // Not acquired: redlock found it locked on every try, or could not ask.
        const code = e instanceof ExecutionError ? 'timeout' : 'unavailable';
        giveUp(new WorkerError(code, `redlock: ${e.message}`));
      });
    });
  },
  async release(lease) {
    if (!held || held.lease !== lease) return false; // released before
    const { signal, finish, done } = held;
    // Lost before this request: using() has ended and released on its own.
    const aborted = signal.aborted;
    finish();
    try {
      const deleted = await holds(done);
      return deleted && !aborted;
    } catch (e) {
      if (aborted) return false;
      throw e;
    } finally {
      held = null;
    }
  },
  async close() {
    if (held) {
      held.finish();
      await held.done.catch(() => {});
      held = null;
    }
  },
});
