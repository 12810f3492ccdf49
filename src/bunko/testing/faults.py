"""Faults of a real deployment, made on purpose: a database connection that drops, refuses or lags, a full disk.

* :class:`FaultProxy` is a TCP proxy on 127.0.0.1 in front of a server (a TCP address or a Unix socket,
  as the throwaway PostgreSQL of :mod:`bunko.testing.postgres` listens on). Real sockets, one thread per
  direction of each connection. Between calls the test switches what it does:

  - :meth:`~FaultProxy.drop` resets every open connection (what a restart, a failover or
    ``pg_terminate_backend`` does to the client: the next statement finds the socket gone);
  - :meth:`~FaultProxy.refuse` resets every new connection as soon as it is accepted (a server that
    is down), :meth:`~FaultProxy.down` is both, :meth:`~FaultProxy.up` lets connections through again;
  - :meth:`~FaultProxy.hold` keeps new connections waiting, unanswered, until :meth:`~FaultProxy.release`
    (a server that accepts but does not answer: a stalled failover, a full backlog);
  - :meth:`~FaultProxy.blackhole` stops forwarding without closing anything: open connections and new ones
    get no answer and no reset (a server or a network that went silent), until :meth:`~FaultProxy.up`;
  - ``latency`` delays every forwarded piece of data by that many seconds.

  The proxy's own kernel still acknowledges what a client sends, so a blackhole alone is silence at the
  application level only. :func:`silent_loopback` makes it silence at the TCP level too: every packet on
  the loopback interface is dropped (``tc netem loss 100%``), so the client's data is never acknowledged,
  as across a network that lost its route. It changes the network namespace it runs in, so it refuses the
  machine's own namespace: run it in a private one (``unshare --net``, root), as ``tests/test_faults.py`` does.

  :meth:`~FaultProxy.wait_for` waits for a condition on its counters (events, not sleeps).
* :func:`tmpfs` mounts a small tmpfs (root only; :class:`FaultUnavailable` says why it cannot) and
  :func:`fill` takes all the space left on it with a ballast file, so a write runs out of space for real;
  removing the ballast gives the space back.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

__all__ = ["FaultProxy", "FaultUnavailable", "fill", "proxied_url", "silent_loopback", "tmpfs", "unix_socket_of"]

_PIECE = 65536


class FaultUnavailable(RuntimeError):
    """This machine cannot make the fault (not root, no tmpfs, mount refused): the message says why."""


def _reset(sock: socket.socket) -> None:
    """Close a socket with a TCP reset (SO_LINGER 0), not an orderly FIN, as a crashed peer's does.

    ``shutdown`` first: closing a socket another thread is blocked in ``recv`` on releases nothing (the
    blocked call holds the socket), so the peer would see neither a reset nor an end, only silence."""
    with contextlib.suppress(OSError):
        if sock.family != getattr(socket, "AF_UNIX", None):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


class _Pair:
    """One proxied connection: the client's socket and the upstream one, pumped by two threads."""

    def __init__(self, proxy: FaultProxy, client: socket.socket, upstream: socket.socket) -> None:
        self.proxy, self.client, self.upstream = proxy, client, upstream
        self._closed = False
        self._lock = threading.Lock()

    def start(self) -> None:
        for source, target in ((self.client, self.upstream), (self.upstream, self.client)):
            threading.Thread(target=self._pump, args=(source, target), daemon=True, name="fault-proxy-pump").start()

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        try:
            while True:
                data = source.recv(_PIECE)
                if not data:
                    break
                if self.proxy.latency > 0:
                    time.sleep(self.proxy.latency)
                if self.proxy.silent:  # blackholed: what arrives is swallowed, nothing is closed
                    continue
                target.sendall(data)
        except OSError:
            pass
        self.close()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        _reset(self.client)
        _reset(self.upstream)
        self.proxy._forget(self)


class FaultProxy:
    """A TCP proxy on 127.0.0.1 in front of ``target`` (a Unix socket path, or ``(host, port)``) whose faults a
    test switches on and off. Use as a context manager, or call :meth:`close`."""

    def __init__(self, target: str | os.PathLike[str] | tuple[str, int]) -> None:
        self.target = target if isinstance(target, tuple) else str(target)
        self.latency = 0.0  # seconds each forwarded piece of data waits
        self.accepted = 0  # connections accepted (passed, refused or held)
        self.refused = 0  # connections reset at once because the proxy refuses
        self.dropped = 0  # open connections reset by drop()
        self.silent = False  # blackhole(): nothing is forwarded, nothing is closed
        self._refusing = False
        self._open = threading.Event()  # cleared while hold() keeps new connections waiting
        self._open.set()
        self._pairs: set[_Pair] = set()
        self._changed = threading.Condition()
        self._stopping = threading.Event()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self.host, self.port = self._listener.getsockname()[:2]
        self._thread = threading.Thread(target=self._accept_loop, daemon=True, name="fault-proxy")
        self._thread.start()

    # -- faults ------------------------------------------------------------------------------
    def drop(self) -> int:
        """Reset every open connection; returns how many."""
        with self._changed:
            pairs = list(self._pairs)
        for pair in pairs:
            pair.close()
        with self._changed:
            self.dropped += len(pairs)
            self._changed.notify_all()
        return len(pairs)

    def refuse(self) -> None:
        """Reset every new connection as soon as it is accepted (open ones go on)."""
        self._refusing = True

    def down(self) -> None:
        """The server is gone: new connections are refused and open ones reset."""
        self.refuse()
        self.drop()

    def blackhole(self) -> None:
        """Forward nothing and close nothing: open connections stay open with no answer, new ones are accepted
        and held unanswered, until :meth:`up` (which forwards again; what was swallowed is lost, so a client
        should not reuse a connection it sent on meanwhile)."""
        self.silent = True
        self._open.clear()

    def up(self) -> None:
        """Connections go through again (ends :meth:`refuse`, :meth:`down`, :meth:`hold` and :meth:`blackhole`)."""
        self._refusing = False
        self.silent = False
        self._open.set()

    def hold(self) -> None:
        """Keep new connections accepted but unanswered until :meth:`release` (or :meth:`up`)."""
        self._open.clear()

    def release(self) -> None:
        """Let held connections (and new ones) through."""
        self._open.set()

    # -- observation ---------------------------------------------------------------------------
    @property
    def connections(self) -> int:
        """Connections open through the proxy now."""
        with self._changed:
            return len(self._pairs)

    def wait_for(self, condition: Callable[[FaultProxy], bool], timeout: float = 120.0) -> None:
        """Wait until ``condition(self)`` holds (checked whenever a connection comes or goes);
        ``TimeoutError`` after ``timeout`` seconds, which only catches a hang."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not condition(self):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"the proxy's condition did not hold within {timeout} s "
                                       f"(accepted {self.accepted}, open {len(self._pairs)}, refused {self.refused})")
                self._changed.wait(min(left, 0.5))

    def url(self, database_url: str) -> str:
        """``database_url`` (a ``postgresql://`` URL of the target server) through this proxy."""
        return proxied_url(database_url, self.host, self.port)

    # -- machinery -------------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                ready, _, _ = select.select([self._listener], [], [], 0.2)
                if not ready:
                    continue
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._changed:
                self.accepted += 1
                self._changed.notify_all()
            threading.Thread(target=self._serve, args=(client,), daemon=True, name="fault-proxy-conn").start()

    def _serve(self, client: socket.socket) -> None:
        while not self._open.wait(0.2):  # held: the client waits for an answer that does not come
            if self._stopping.is_set() or self._refusing:
                break
        if self._refusing or self._stopping.is_set():
            _reset(client)
            with self._changed:
                self.refused += 1
                self._changed.notify_all()
            return
        try:
            if isinstance(self.target, tuple):
                upstream = socket.create_connection(self.target, timeout=30)
                upstream.settimeout(None)
            else:
                upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                upstream.connect(self.target)
        except OSError:
            _reset(client)
            with self._changed:
                self.refused += 1
                self._changed.notify_all()
            return
        pair = _Pair(self, client, upstream)
        with self._changed:
            self._pairs.add(pair)
            self._changed.notify_all()
        pair.start()

    def _forget(self, pair: _Pair) -> None:
        with self._changed:
            self._pairs.discard(pair)
            self._changed.notify_all()

    def close(self) -> None:
        """Stop listening and reset every connection."""
        self._stopping.set()
        self._open.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        self._thread.join(5)
        self.drop()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def unix_socket_of(database_url: str) -> str:
    """The Unix socket file a ``postgresql://...?host=/dir`` URL connects to (``/dir/.s.PGSQL.<port>``)."""
    parts = urlsplit(database_url)
    query = dict(parse_qsl(parts.query))
    folder = query.get("host") or ""
    if not folder.startswith("/"):
        raise ValueError("the URL does not name a Unix socket folder (host=/...)")
    return f"{folder}/.s.PGSQL.{query.get('port') or parts.port or 5432}"


def proxied_url(database_url: str, host: str, port: int) -> str:
    """``database_url`` with its server replaced by ``host:port`` (user, database and other options kept)."""
    parts = urlsplit(database_url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k not in ("host", "port", "hostaddr")]
    user = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
    return urlunsplit((parts.scheme, f"{user}{host}:{port}", parts.path, urlencode(query), ""))


def _private_network_namespace() -> bool:
    """Whether this process runs in a network namespace of its own: one with the loopback interface alone (a new
    namespace's), and not its parent process's where that can be read."""
    if {name for _, name in socket.if_nameindex()} != {"lo"}:
        return False
    try:
        return os.stat("/proc/self/ns/net").st_ino != os.stat(f"/proc/{os.getppid()}/ns/net").st_ino
    except OSError:
        return True


_SILENCE = (["ip", "rule", "del", "pref", "0"], ["ip", "rule", "add", "pref", "100", "lookup", "local"],
            ["ip", "rule", "add", "pref", "10", "to", "127.0.0.0/8", "blackhole"])
_SOUND = (["ip", "rule", "del", "pref", "10"], ["ip", "rule", "del", "pref", "100"],
          ["ip", "rule", "add", "pref", "0", "lookup", "local"])


@contextlib.contextmanager
def silent_loopback() -> Iterator[None]:
    """Drop every packet to 127.0.0.0/8 for the block, so TCP peers over the loopback get no acknowledgement: an
    open connection goes silent without a reset (a new one fails at once). A ``blackhole`` routing rule ahead of
    the local table (``ip rule``); the kernel needs no queueing module for it.

    Only in a private network namespace (``unshare --net``; root), never the machine's own, whose other users
    would lose their loopback too: :class:`FaultUnavailable` says why it cannot."""
    if not _private_network_namespace():
        raise FaultUnavailable("silent_loopback runs only in a private network namespace (unshare --net)")
    for step in _SILENCE:
        done = subprocess.run(step, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise FaultUnavailable(f"cannot silence the loopback ({' '.join(step)}): "
                                   f"{done.stderr.strip() or done.returncode}")
    try:
        yield
    finally:
        for step in _SOUND:
            subprocess.run(step, capture_output=True, check=False)


@contextlib.contextmanager
def tmpfs(folder: Path, size_mb: int) -> Iterator[Path]:
    """Mount a tmpfs of ``size_mb`` MiB on ``folder`` (created if needed) for the block; unmounted after.

    Raises :class:`FaultUnavailable` when the mount is not permitted (not root, no tmpfs, a container
    without the capability), so a test can skip with the reason.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        raise FaultUnavailable("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={int(size_mb)}m,mode=0777", "tmpfs", str(folder)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise FaultUnavailable(f"cannot mount a tmpfs: {done.stderr.strip() or done.returncode}")
    try:
        yield folder
    finally:
        for _ in range(50):  # a process that has just closed its files may keep the mount busy a moment
            if subprocess.run(["umount", str(folder)], capture_output=True, check=False).returncode == 0:
                break
            time.sleep(0.1)
        else:
            subprocess.run(["umount", "-l", str(folder)], capture_output=True, check=False)


def fill(folder: Path, *, leave: int = 0, name: str = ".ballast") -> Path:
    """Take the space left on ``folder``'s file system with a ballast file (all of it but ``leave`` bytes);
    returns the file: delete it to give the space back."""
    path = Path(folder) / name
    with open(path, "ab", buffering=0) as out:
        block = b"\0" * (1 << 20)
        while True:
            free = os.statvfs(folder).f_bavail * os.statvfs(folder).f_frsize - leave
            if free <= 0:
                break
            try:
                out.write(block[: min(len(block), free)])
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break
        with contextlib.suppress(OSError):
            os.fsync(out.fileno())
    return path
