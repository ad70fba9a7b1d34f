"""What the server's Kafka readers share: an AdminClient made once, and rounds on a thread of their own.

The watermark reader and the Kafka group observer each run :meth:`KafkaRounds.round` every
``interval`` seconds; a round that fails is counted (``failures{reason="store"}``), said at most
once a minute per reason, and the next one tries again. A subclass sets ``_settings`` (the
client's), ``interval`` and ``failures`` (a Counter labelled by reason), and gives ``round``, its
thread's name and the name its warnings start with.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from prometheus_client import Counter

#: A failure of one kind is logged at most this often (seconds); the counters count every one.
WARN_EVERY = 60.0


class KafkaRounds:
    """Rounds of one of the server's Kafka readers (see the module docstring)."""

    #: The name of the rounds' thread, and of the reader in its start line.
    thread_name: str = "offsetstore-kafka"
    #: What the warnings start with, e.g. "kafka watermarks".
    label: str = "kafka"
    interval: float
    failures: Counter
    _settings: dict[str, Any]

    def __init__(self, admin: Any = None) -> None:
        self._admin = admin
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._warned: dict[str, float] = {}

    def round(self) -> object:  # pragma: no cover - each reader has its own
        raise NotImplementedError

    def _failed(self, reason: str, error: BaseException) -> None:
        self.failures.labels(reason).inc()
        self._warn(reason, str(error))

    def _warn(self, reason: str, message: str) -> None:
        now = time.monotonic()
        if now - self._warned.get(reason, -WARN_EVERY) >= WARN_EVERY:
            self._warned[reason] = now
            # The reader's own logger (its module's), as before the rounds were shared.
            logging.getLogger(type(self).__module__).warning("%s: %s", self.label, message, extra={"reason": reason})

    def start_client(self) -> Any:
        """Makes the Kafka client (no thread: :meth:`round` runs when called)."""
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient(self._settings)
        return self

    def start_rounds(self) -> None:
        """Makes the client and starts the rounds on their thread."""
        self.start_client()
        self._thread = threading.Thread(target=self._loop, name=self.thread_name, daemon=True)
        self._thread.start()

    def stop(self, wait: float = 2.0) -> None:
        """Stops the rounds; waits ``wait`` seconds at most (a round waiting for a broker that is down is
        abandoned: its thread is a daemon, and what it did not store is read again next time)."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(wait)
            self._thread = None

    def _loop(self) -> None:
        while not self._stopping.is_set():
            started = time.monotonic()
            try:
                self.round()
            except Exception as error:  # the store is down: the next round tries again
                self._failed("store", error)
            self._stopping.wait(max(0.0, self.interval - (time.monotonic() - started)))
