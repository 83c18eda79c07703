'use strict';
// The ioredis client of the Redis workers (redlock.js, redis-semaphore.js).
const Redis = require('ioredis');

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

module.exports = { connect };
