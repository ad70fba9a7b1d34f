"""The gRPC port's connections, bounded: a handshake deadline, a cap in all, a cap per peer address, the descriptor limit.

grpc core keeps a connection whose TLS handshake never finishes for 120 s and caps nothing:
1,100 silent connections from one address held a process limited to 1,024 descriptors at its
limit for two minutes, and every new gRPC call and the HTTPS listener with it (issue 56, M1).
grpcio has no hook at accept, so the bounds are of three kinds:

- grpc core's own channel arguments (:func:`server_options`): the handshake within
  ``handshake_seconds`` (``grpc.server_handshake_timeout_ms``), and at most ``max_connections``
  at once (``grpc.max_allowed_incoming_connections``: more are closed at accept, before their
  handshake), below the descriptor limit, so that nothing the port accepts can take the
  descriptors the HTTP listener and the database pool need;
- :class:`PeerCap`, which closes a peer address's connections beyond ``max_per_peer``: grpc
  cannot tell it an accepted connection's address, so it reads the sockets on the port
  (``/proc``) when this process's descriptors grow, and shuts down those beyond the cap.
  Between two reads a fast flood may take more; the cap in all still holds;
- :func:`raise_descriptor_limit`: the soft limit of descriptors raised to the hard one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import resource
import socket
import stat
import threading
import time
from collections import defaultdict

__all__ = [
    "PEER_CHECK_SECONDS",
    "PeerCap",
    "descriptor_limit",
    "raise_descriptor_limit",
    "server_options",
    "total_connections",
]

log = logging.getLogger(__name__)

#: How often :class:`PeerCap` counts this process's descriptors (and reads the port's connections if they grew).
PEER_CHECK_SECONDS = 0.1

#: How often :class:`PeerCap` reads the port's connections anyway, while the process holds more than the cap.
QUIET_CHECK_SECONDS = 5.0

#: At most one log line this often about the connections closed.
LOG_EVERY_SECONDS = 60.0

#: Descriptors kept out of gRPC's cap in all: the HTTP listener's 256, the pools, the logs, the files.
RESERVED_DESCRIPTORS = 384

# /proc/net/tcp states that hold a descriptor of ours: established, and closed by the peer only.
_HELD_STATES = frozenset({"01", "08"})


def raise_descriptor_limit() -> int:
    """Raises the soft limit of open descriptors to the hard one (logged when it moves); returns the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # An unlimited hard limit is refused for descriptors (fs.nr_open bounds them): take a large finite one.
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft == resource.RLIM_INFINITY or soft >= target:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as error:
        log.warning("descriptor limit left at %d: %s", soft, error)
        return soft
    log.info("descriptor limit raised", extra={"from": soft, "to": target})
    return target


def descriptor_limit() -> int:
    """This process's soft limit of open descriptors (a large number when unlimited)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return 1 << 20 if soft == resource.RLIM_INFINITY else soft


def total_connections(descriptors: int) -> int:
    """gRPC connections one process takes at once by default: its descriptors less :data:`RESERVED_DESCRIPTORS`, at least 64."""
    return max(64, descriptors - RESERVED_DESCRIPTORS)


def server_options(handshake_seconds: float, max_connections: int) -> list[tuple[str, int]]:
    """grpc core's channel arguments for the deadline of a handshake and the connections in all."""
    return [
        ("grpc.server_handshake_timeout_ms", max(1, round(handshake_seconds * 1000))),
        ("grpc.max_allowed_incoming_connections", max_connections),
    ]


class PeerCap:
    """Keeps each peer address to ``max_per_peer`` connections to a port; a thread of its own.

    Linux only (it reads ``/proc``); elsewhere it says so once and does nothing. A connection
    is closed by ``shutdown`` on a duplicate of grpc's descriptor, checked to be the same
    socket: grpc then sees the end of the stream and closes its own, as if the peer had left.
    Which of a peer's connections go is unspecified (those beyond the cap in inode order,
    which the kernel hands out per CPU in batches, not in the order of arrival). The count is
    of every process's connections to the port (the network namespace's table), so the cap
    holds for ``--processes`` together; each process closes its own. A thread, not the event
    loop's executor: a loop busy with calls must not delay it.
    """

    def __init__(self, max_per_peer: int, interval: float = PEER_CHECK_SECONDS) -> None:
        self.port = 0
        self.max_per_peer = max_per_peer
        self.interval = interval
        self.closed = 0
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, port: int) -> None:
        """Caps the connections to ``port`` from now on (nothing when ``max_per_peer`` is 0)."""
        self.port = port
        if self.max_per_peer <= 0:
            return
        if not os.path.exists("/proc/self/net/tcp"):
            log.warning("no /proc/self/net/tcp: gRPC connections per peer address are not capped")
            return
        self._thread = threading.Thread(target=self._run, name="offsetstore-peer-cap", daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)
            self._thread = None

    def _run(self) -> None:
        # Reading the port's sockets costs the kernel a walk of its whole table (12-37 ms here), so
        # it is read when this process's descriptors grew by half the cap since the last read (a
        # flood), every QUIET_CHECK_SECONDS while the process holds more than the cap (slow growth),
        # and again at once while a read finds connections to close. Counting descriptors is cheap.
        unsaid, said_at = 0, -LOG_EVERY_SECONDS
        step = max(4, self.max_per_peer // 2)
        base, read_at = 1 << 30, 0.0  # the fewest descriptors since the last read, and when that was
        while not self._stopping.wait(self.interval):
            try:
                held = _open_descriptors()
                base = min(base, held)
                now = time.monotonic()
                if held - base < step and (held <= self.max_per_peer or now - read_at < QUIET_CHECK_SECONDS):
                    continue
                while (closed := self.check()) and not self._stopping.is_set():
                    unsaid += closed
                base, read_at = _open_descriptors(), time.monotonic()
            except OSError:
                log.exception("gRPC connections per peer not checked")
            # A flood is one line a minute, with the count since the last.
            if unsaid and time.monotonic() - said_at >= LOG_EVERY_SECONDS:
                log.warning(
                    "gRPC connections beyond the cap per peer address closed",
                    extra={"count": unsaid, "max_connections_per_peer": self.max_per_peer},
                )
                unsaid, said_at = 0, time.monotonic()

    def check(self) -> int:
        """Closes the connections beyond the cap; returns how many."""
        over = _over_cap(_peers(self.port), self.max_per_peer)
        if not over:
            return 0
        closed = 0
        for fd, inode in _own_sockets(over).items():
            if _shut(fd, inode):
                closed += 1
        self.closed += closed
        return closed


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def _peers(port: int) -> dict[str, list[int]]:
    """The socket inodes of the connections to ``port`` (in this network namespace), by peer address."""
    peers: dict[str, list[int]] = defaultdict(list)
    local_port = f":{port:04X} "  # as the table spells the local address's port, before the remote address
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            with open(table) as lines:
                next(lines, None)
                for line in lines:
                    if local_port not in line:
                        continue
                    fields = line.split()
                    local, remote, state, inode = fields[1], fields[2], fields[3], int(fields[9])
                    if state in _HELD_STATES and inode and local.endswith(local_port[:-1]):
                        peers[remote.rpartition(":")[0]].append(inode)
        except FileNotFoundError:
            continue
    return peers


def _over_cap(peers: dict[str, list[int]], cap: int) -> set[int]:
    """The inodes beyond ``cap`` of each peer (in inode order)."""
    return {inode for inodes in peers.values() if len(inodes) > cap for inode in sorted(inodes)[cap:]}


def _own_sockets(inodes: set[int]) -> dict[int, int]:
    """This process's descriptors of ``inodes`` (another process's sockets on the port are its own to cap)."""
    found = {}
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            link = os.readlink(f"/proc/self/fd/{name}")
            if link.startswith("socket:[") and (inode := int(link[8:-1])) in inodes:
                found[int(name)] = inode
    return found


def _shut(fd: int, inode: int) -> bool:
    """Shuts the socket ``fd`` down if it is still ``inode`` (a closed descriptor's number may be reused)."""
    try:
        copy = os.dup(fd)
    except OSError:
        return False
    try:
        status = os.fstat(copy)
        if not stat.S_ISSOCK(status.st_mode) or status.st_ino != inode:
            return False
        with socket.socket(fileno=copy) as sock:
            copy = -1  # the socket object owns it now
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        return True
    finally:
        if copy >= 0:
            os.close(copy)
