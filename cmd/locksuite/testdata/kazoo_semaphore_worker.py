"""A worker written from docs/protocol.md alone, without the helper, for a
lock the repository does not ship: kazoo's Semaphore with one lease
(kazoo.recipe.lock.Semaphore, max_leases=1). TestWorkerFlag runs it with
locksuite run --worker."""

import json
import sys

import kazoo.version
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, SessionExpiredError
from kazoo.retry import KazooRetry

zk = sem = path = None
n = 0


def reply(msg, **fields):
    fields["in_reply_to"] = msg.get("id")
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    msg = json.loads(line)
    t = msg.get("type")
    try:
        if t == "init":
            if msg["protocol"] != 1:
                reply(msg, type="error", code="unsupported", definite=True, text="protocol 1 only")
                continue
            path = "/" + msg["key"]
            # Commands retried while the client reconnects (after a pause
            # past the session, it must learn the session expired first).
            zk = KazooClient(hosts=msg["url"], timeout=msg["lease_ms"] / 1000,
                             command_retry=KazooRetry(max_tries=-1, max_delay=0.2, deadline=3))
            zk.start(timeout=10)
            reply(msg, type="init_ok", library="kazoo Semaphore", version=kazoo.version.__version__,
                  runtime="CPython " + sys.version.split()[0], capabilities=["ttl"],
                  ttl_ms=msg["lease_ms"], expiry_ms=msg["lease_ms"] * 3 // 2)
        elif t == "acquire":
            s = zk.Semaphore(path, max_leases=1)
            if s.acquire(timeout=msg["timeout_ms"] / 1000):
                n += 1
                sem = s
                reply(msg, type="acquire_ok", lease="s%d" % n, fence=0)
            else:
                reply(msg, type="error", code="timeout", definite=False, text="no lease in time")
        elif t == "release":
            held = False
            if sem is not None and msg["lease"] == "s%d" % n:
                try:  # an expired session took its node with it
                    held = zk.retry(zk.exists, sem.create_path) is not None
                    sem.release()
                except SessionExpiredError:
                    pass
                sem = None
            reply(msg, type="release_ok", held=held)
        elif t == "close":
            zk.stop()
            reply(msg, type="close_ok")
        else:
            reply(msg, type="error", code="unsupported", definite=True, text="no " + str(t))
    except KazooException as e:
        reply(msg, type="error", code="unavailable", definite=False, text=repr(e))
