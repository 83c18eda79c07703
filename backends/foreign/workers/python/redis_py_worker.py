"""redis-py's Lock (redis.lock.Lock), as it ships, for locksuite.

The lock is SET key token NX PX lease and a compare-and-delete script on
release; redis-py renews nothing by itself. The fence is an INCR of
key:fence taken after the grant, as the pause-testing guide does: a token
that orders grants, not one the lock gives.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import redis  # noqa: E402
from redis.exceptions import ConnectionError, LockError, LockNotOwnedError, TimeoutError  # noqa: E402

import locksuite_worker as lw  # noqa: E402


class RedisPy(lw.Worker):
    library, version = "redis-py", redis.__version__
    capabilities = ["fence", "ttl", "cleanup"]

    def init(self, msg):
        self.key, self.lease_s = msg["key"], msg["lease_ms"] / 1000
        # Bounded socket timeouts: a blackholed connection fails the
        # request instead of hanging it.
        self.r = redis.Redis.from_url(msg["url"], username=msg["username"] or None, password=msg["password"] or None,
                                      socket_timeout=1, socket_connect_timeout=1)
        self.leases, self.n = {}, 0
        return msg["lease_ms"], msg["lease_ms"]  # Redis frees a PX key on time

    def acquire(self, timeout_ms):
        # sleep: how often a waiter tries SET NX again (redis-py's default
        # is 0.1 s, a tenth of a second added to every hand-over).
        lock = self.r.lock(self.key, timeout=self.lease_s, sleep=0.01, thread_local=False)
        try:
            got = lock.acquire(blocking=True, blocking_timeout=timeout_ms / 1000)
            if got:
                fence = self.r.incr(self.key + ":fence")
        except (ConnectionError, TimeoutError) as e:
            raise lw.Error("unavailable", str(e))
        if not got:
            raise lw.Error("timeout", "not acquired within %d ms" % timeout_ms, True)
        self.n += 1
        lease = "r%d" % self.n
        self.leases[lease] = lock
        return lease, fence

    def release(self, lease):
        lock = self.leases.pop(lease, None)
        if lock is None:
            return False  # released before
        try:
            lock.release()
            return True
        except LockNotOwnedError:
            return False  # expired, perhaps taken: the script deleted nothing
        except LockError:
            return False
        except (ConnectionError, TimeoutError) as e:
            self.leases[lease] = lock
            raise lw.Error("unavailable", str(e))

    def cleanup(self):
        self.r.delete(self.key + ":fence")

    def close(self):
        self.r.close()


if __name__ == "__main__":
    lw.run(RedisPy())
