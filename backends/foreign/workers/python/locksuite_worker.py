"""The worker side of locksuite's worker protocol (docs/protocol.md), for Python.

A worker is its lock's acquire and release and little else:

    import locksuite_worker

    class MyLock(locksuite_worker.Worker):
        library, version, capabilities = "my-lock", "1.0", ["ttl"]
        def init(self, msg): ...                  # connect to msg["url"]; return (ttl_ms, expiry_ms)
        def acquire(self, timeout_ms): ...        # return (lease, fence), or raise Error("timeout", ...)
        def release(self, lease): ...             # return True if it was still this lease's

    locksuite_worker.run(MyLock())

Requests are handled one at a time, in order, on the main thread. lost()
may be called from any thread.
"""

import json
import platform
import sys
import threading
import traceback

PROTOCOL = 1


class Error(Exception):
    """An error reply: code is one of docs/protocol.md's (timeout,
    unavailable, not-held, unsupported, malformed, crash); definite promises
    that the operation did not happen."""

    def __init__(self, code, text, definite=False):
        super().__init__(text)
        self.code, self.definite = code, definite


class Worker:
    library = "unnamed"
    version = "unknown"
    capabilities = []

    def init(self, msg):
        raise Error("unsupported", "init", True)

    def acquire(self, timeout_ms):
        raise Error("unsupported", "acquire", True)

    def release(self, lease):
        raise Error("unsupported", "release", True)

    def cleanup(self):
        pass

    def close(self):
        pass

    def lost(self, lease, text):
        """Tells the suite that the library said lease is lost."""
        _send({"type": "lost", "lease": lease, "text": text})


_out = threading.Lock()


def _send(obj):
    line = json.dumps(obj) + "\n"
    with _out:
        sys.stdout.write(line)
        sys.stdout.flush()


def runtime():
    return "%s %s (%s)" % (platform.python_implementation(), platform.python_version(), sys.executable)


def _handle(w, msg):
    t = msg.get("type")
    if t == "init":
        if msg.get("protocol") != PROTOCOL:
            raise Error("unsupported", "protocol %r: this worker speaks %d" % (msg.get("protocol"), PROTOCOL), True)
        ttl_ms, expiry_ms = w.init(msg)
        return {"type": "init_ok", "library": w.library, "version": w.version, "runtime": runtime(),
                "capabilities": list(w.capabilities), "ttl_ms": ttl_ms, "expiry_ms": expiry_ms}
    if t == "acquire":
        lease, fence = w.acquire(msg["timeout_ms"])
        return {"type": "acquire_ok", "lease": lease, "fence": fence}
    if t == "release":
        return {"type": "release_ok", "held": bool(w.release(msg["lease"]))}
    if t == "cleanup":
        w.cleanup()
        return {"type": "cleanup_ok"}
    if t == "close":
        w.close()
        return {"type": "close_ok"}
    raise Error("unsupported", "request type %r" % t, True)


def run(w):
    """Serves requests from standard input until it ends, then exits 0."""
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except ValueError as e:
            _send({"type": "error", "code": "malformed", "definite": True, "text": str(e)})
            continue
        try:
            reply = _handle(w, msg)
        except Error as e:
            reply = {"type": "error", "code": e.code, "definite": e.definite, "text": str(e)}
        except Exception as e:  # a bug, or an exception of the library's
            traceback.print_exc(file=sys.stderr)
            reply = {"type": "error", "code": "crash", "definite": False, "text": "%s: %s" % (type(e).__name__, e)}
        reply["in_reply_to"] = msg.get("id")
        _send(reply)
    sys.exit(0)
