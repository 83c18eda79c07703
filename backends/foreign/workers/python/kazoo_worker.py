"""kazoo's Lock (kazoo.recipe.lock.Lock), as it ships, for locksuite.

The lock is an ephemeral sequential znode under /key: the lowest holds it,
and it lives as long as the client's session (the lease is the session
timeout). The fence is the node's sequence number, which ZooKeeper
increases with every node created under /key.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import kazoo  # noqa: E402
import kazoo.version  # noqa: E402
from kazoo.client import KazooClient, KazooState  # noqa: E402
from kazoo.exceptions import KazooException, LockTimeout, NoNodeError, NotEmptyError, SessionExpiredError  # noqa: E402
from kazoo.retry import KazooRetry  # noqa: E402

import locksuite_worker as lw  # noqa: E402


class Kazoo(lw.Worker):
    library, version = "kazoo", kazoo.version.__version__
    capabilities = ["fence", "ttl", "lost", "cleanup"]

    def init(self, msg):
        self.path = "/" + msg["key"]
        auth = [("digest", "%s:%s" % (msg["username"], msg["password"]))] if msg["username"] else None
        self.zk = KazooClient(hosts=msg["url"], timeout=msg["lease_ms"] / 1000, auth_data=auth,
                              connection_retry=KazooRetry(max_tries=-1, max_delay=0.2),
                              command_retry=KazooRetry(max_tries=-1, max_delay=0.2, deadline=1.5))
        self.held, self.n = None, 0  # (lease, lock) while a lease is held
        self.expired = None  # the lease whose session kazoo reported LOST
        self.zk.add_listener(self.on_state)
        self.zk.start(timeout=10)
        # The server expires a session on the first tick after its timeout:
        # a tick is at most half of the timeout (minSessionTimeout = 2 ticks).
        return msg["lease_ms"], msg["lease_ms"] * 3 // 2

    def on_state(self, state):
        # kazoo's documented advice: SUSPENDED means the lock may be lost,
        # LOST that it is.
        held = self.held
        if held and state == KazooState.LOST:
            self.expired = held[0]  # and with the session, its ephemeral node
        if held and state in (KazooState.SUSPENDED, KazooState.LOST):
            self.lost(held[0], "kazoo: connection state " + state)

    def acquire(self, timeout_ms):
        lock = self.zk.Lock(self.path, "locksuite")
        try:
            got = lock.acquire(blocking=True, timeout=timeout_ms / 1000)
        except LockTimeout as e:
            raise lw.Error("timeout", str(e))
        except KazooException as e:
            raise lw.Error("unavailable", "%s: %s" % (type(e).__name__, e))
        if not got:
            raise lw.Error("timeout", "not acquired within %d ms" % timeout_ms)
        self.n += 1
        lease = "z%d" % self.n
        self.held = (lease, lock)
        return lease, int(lock.node[-10:]) + 1  # sequences start at 0; fences at 1

    def release(self, lease):
        if not self.held or self.held[0] != lease:
            return False  # released before
        lock = self.held[1]
        try:
            # The node is gone if the session expired meanwhile: then the
            # lock was no longer this lease's, whatever kazoo believes.
            # (retried while kazoo reconnects, as its Lock.release is)
            mine = self.expired != lease and self.zk.retry(self.zk.exists, self.path + "/" + lock.node) is not None
            lock.release()
        except SessionExpiredError:
            mine = False  # and with the session, its ephemeral node
        except KazooException as e:
            raise lw.Error("unavailable", "%s: %s" % (type(e).__name__, e))
        self.held = None
        return mine

    def cleanup(self):
        try:
            self.zk.delete(self.path)
        except (NoNodeError, NotEmptyError):
            pass

    def close(self):
        self.held = None
        self.zk.stop()
        self.zk.close()


if __name__ == "__main__":
    lw.run(Kazoo())
