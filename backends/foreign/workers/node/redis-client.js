'use strict';
// What the Redis workers (redlock.js, redis-semaphore.js) share: the ioredis
// client, and the run of a worker whose lock is one Redis key.
const Redis = require('ioredis');
const { run, version } = require('./locksuite-worker');

// connect returns an ioredis client for init's msg (url, username,
// password). Short timeouts: a cut or blackholed connection fails its
// command instead of hanging the worker; it reconnects when the path is
// back. Its errors are logged to stderr.
function connect(msg) {
  const redis = new Redis(msg.url, { username: msg.username || undefined, password: msg.password || undefined,
    maxRetriesPerRequest: 1, connectTimeout: 1000, commandTimeout: 1000,
    retryStrategy: (times) => Math.min(times * 50, 500) });
  redis.on('error', (e) => console.error('ioredis:', e.message));
  return redis;
}

// runRedis runs w with locksuite-worker's run as the worker of npm package
// w.library, whose lock is one Redis key set with PX lease_ms: init
// connects (connect) and calls w.init(redis, key, leaseMs, lost), and
// replies that the TTL and the expiry are the lease (Redis frees a PX key
// on time); w.acquire and w.release serve as they are; cleanup has nothing
// to remove (the lock keeps only its key, which release deletes); close
// calls w.close, then quits the client.
function runRedis(w) {
  let redis;
  run({
    library: w.library,
    version: version(w.library),
    capabilities: ['ttl', 'lost', 'cleanup'],
    async init(msg, lost) {
      redis = connect(msg);
      await w.init(redis, msg.key, msg.lease_ms, lost);
      return { ttl_ms: msg.lease_ms, expiry_ms: msg.lease_ms };
    },
    acquire: w.acquire,
    release: w.release,
    async cleanup() {},
    async close() {
      await w.close();
      if (redis) await redis.quit().catch(() => {});
    },
  });
}

module.exports = { connect, runRedis };
