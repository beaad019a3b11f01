"""Request bodies read whole, bounded in size and in time, before the app sees them.

:class:`BodyGuard` wraps the WSGI app. For a request that carries a body it reads the
body itself, then hands the app an in-memory copy:

- a body larger than ``[api] max_body_bytes`` is answered 413, whether its size was
  announced (``Content-Length``) or only found while reading (``Transfer-Encoding:
  chunked``); RFC 9110 section 15.5.14;
- a body that has not arrived whole within ``timeout`` seconds of the start of its
  reading is answered 408 (RFC 9110 section 15.5.9) and the connection is closed. A
  client that sends its body at one byte a second would otherwise hold a gunicorn
  thread for as long as it likes; with a few such clients no thread is left for Nova.

The deadline is a wall-clock budget for the whole body, not a timeout per ``recv``
(that one a client meets by sending a byte just before it expires). Under gunicorn, a
single watchdog thread per worker process shuts the read side of the socket of a
request whose deadline passed (``environ["gunicorn.socket"]``); the blocked read then
ends at once and the thread is free. Elsewhere (the test client, other servers) the
body is read the same way but without the watchdog.

Nova, Cinder and Manila send their whole body at once, over a data-centre network, and
give up after 10 s (Nova) or 5 s (Cinder, Manila): a body not here after
:data:`DEFAULT_BODY_TIMEOUT` seconds belongs to no caller still waiting.
"""

from __future__ import annotations

import heapq
import io
import itertools
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from cortex.ids import new_uuid

LOG = logging.getLogger(__name__)

#: Seconds a request's whole body may take to arrive (Cinder's and Manila's own timeout).
DEFAULT_BODY_TIMEOUT = 5.0
_CHUNK = 64 * 1024
_TITLES = {400: "Bad Request", 408: "Request Timeout", 413: "Request Entity Too Large"}

StartResponse = Callable[..., Any]


class _Watch:
    """One watched socket: fired once its deadline passed, unless finished before."""

    __slots__ = ("sock", "done", "fired", "lock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.done = False
        self.fired = False
        self.lock = threading.Lock()

    def finish(self) -> bool:
        """Stop watching; True when the deadline had fired already."""
        with self.lock:
            self.done = True
            return self.fired

    def fire(self) -> None:
        """Shut the socket's read side (a blocked ``recv`` returns at once), once."""
        with self.lock:
            if self.done or self.fired:
                return
            self.fired = True
            try:
                self.sock.shutdown(socket.SHUT_RD)
            except OSError:  # already closed by the client: nothing to wake
                pass


class Watchdog:
    """A daemon thread that fires each :meth:`watch`'s deadline (monotonic seconds).

    One per process; started on the first watch in that process (after gunicorn's
    fork, never in the master). Finished watches stay in the heap until their deadline
    and are then dropped, which keeps ``finish`` a flag under a lock.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, _Watch]] = []
        self._seq = itertools.count()
        self._pid = 0

    def watch(self, sock: socket.socket, deadline: float) -> _Watch:
        """Shut ``sock``'s read side at ``deadline`` unless the returned watch is finished."""
        entry = _Watch(sock)
        with self._cond:
            if self._pid != os.getpid():
                self._pid = os.getpid()
                self._heap.clear()
                threading.Thread(target=self._run, name="body-watchdog", daemon=True).start()
            heapq.heappush(self._heap, (deadline, next(self._seq), entry))
            self._cond.notify()
        return entry

    def _run(self) -> None:
        """Fire due watches; sleep until the next deadline or a new watch."""
        with self._cond:
            while True:
                now = self._clock()
                while self._heap and (self._heap[0][2].done or self._heap[0][0] <= now):
                    heapq.heappop(self._heap)[2].fire()
                self._cond.wait(self._heap[0][0] - now if self._heap else None)


_WATCHDOG = Watchdog()


class BodyGuard:
    """WSGI middleware: read the request body whole, within ``max_bytes`` and ``timeout`` s.

    ``app`` is the wrapped WSGI app, ``max_bytes`` the largest accepted body (bytes,
    ``[api] max_body_bytes``), ``timeout`` the seconds the whole body may take. A request
    without a body passes untouched; a body that was read reaches the app as a
    ``BytesIO`` with its ``CONTENT_LENGTH`` set. Answers of its own, in the API-WG error
    shape: 400 (a ``Content-Length`` that is no number, a body shorter than announced),
    408 (too slow; ``Connection: close``), 413 (too large).
    """

    def __init__(self, app: Callable[..., Iterable[bytes]], max_bytes: int,
                 timeout: float = DEFAULT_BODY_TIMEOUT, watchdog: Watchdog = _WATCHDOG,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout = timeout
        self._watchdog = watchdog
        self._clock = clock

    def __call__(self, environ: dict[str, Any], start_response: StartResponse):
        """Read the body (or answer 400/408/413), then call the app."""
        chunked = "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower()
        declared = (environ.get("CONTENT_LENGTH") or "").strip()
        if not chunked and declared in ("", "0"):
            return self.app(environ, start_response)
        length = None
        if not chunked:
            if not declared.isdigit():
                return _answer(start_response, 400, "Content-Length is not a number")
            length = int(declared)
            if length > self.max_bytes:
                return _answer(start_response, 413, f"body larger than {self.max_bytes} bytes")
        sock = environ.get("gunicorn.socket")
        watch = (self._watchdog.watch(sock, self._clock() + self.timeout)
                 if isinstance(sock, socket.socket) else None)
        try:
            body = _read(environ["wsgi.input"], length, self.max_bytes)
        except Exception as exc:  # noqa: BLE001 - a reset, a malformed chunk: the client's
            body = exc
        finally:
            fired = watch.finish() if watch is not None else False
        if fired:
            LOG.warning("request body not received within %g s from %s: 408", self.timeout,
                        environ.get("REMOTE_ADDR", "?"))
            return _answer(start_response, 408,
                           f"the body did not arrive within {self.timeout:g} s", close=True)
        if body is None:
            return _answer(start_response, 413, f"body larger than {self.max_bytes} bytes")
        if isinstance(body, Exception) or (length is not None and len(body) < length):
            LOG.info("request body unreadable from %s: %s", environ.get("REMOTE_ADDR", "?"),
                     type(body).__name__ if isinstance(body, Exception) else "short")
            return _answer(start_response, 400, "the body ended before it was complete or "
                           "is malformed", close=True)
        environ["wsgi.input"] = io.BytesIO(body)
        environ["CONTENT_LENGTH"] = str(len(body))
        environ.pop("HTTP_TRANSFER_ENCODING", None)
        environ["wsgi.input_terminated"] = True
        return self.app(environ, start_response)


def _read(stream: Any, length: int | None, max_bytes: int) -> bytes | None:
    """``length`` bytes of ``stream`` (until its end when None); None past ``max_bytes``.

    Raises what the server's stream raises (OSError for a closed or reset socket,
    gunicorn's ParseException for a malformed chunk). Stops early at the end of the
    stream.
    """
    parts, got = [], 0
    while length is None or got < length:
        want = _CHUNK if length is None else min(_CHUNK, length - got)
        data = stream.read(want)
        if not data:
            break
        got += len(data)
        if got > max_bytes:
            return None
        parts.append(data)
    return b"".join(parts)


def _answer(start_response: StartResponse, status: int, detail: str,
            close: bool = False) -> list[bytes]:
    """An API-WG error body with ``status`` (and ``Connection: close`` when asked)."""
    request_id = f"req-{new_uuid()}"
    body = json.dumps({"errors": [{"status": status, "title": _TITLES[status],
                                   "detail": detail, "request_id": request_id}]}).encode()
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body))),
               ("x-openstack-request-id", request_id)]
    if close:
        headers.append(("Connection", "close"))
    start_response(f"{status} {_TITLES[status]}", headers)
    return [body]
