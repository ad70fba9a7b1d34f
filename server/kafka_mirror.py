"""The server's mirror of stored offsets into a Kafka group coordinator, for the tools that read only Kafka.

Burrow, kafka-lag-exporter, kafka-ui and ``kafka-consumer-groups --describe`` read a group's
offsets from Kafka; a Spark job or a gRPC client that commits to offsetstore looks dead to
them. With ``--mirror-kafka-bootstrap`` and ``--mirror-kafka-groups PREFIX``, the server's
supervising process (once, not each serving process) copies the offsets of groups whose id
starts with a prefix into the Kafka group of the same id (AdminClient
``alter_consumer_group_offsets``), every ``--mirror-interval``, latest offset per partition.

It reads what to copy from the database, not from the server's calls: every writer (the
server, the Spark sink, the Kafka recipe, Flink's sink, the SQL API, Debezium's capture, a
reset, an adoption) writes a history row for each offset it changes, and each round reads
the history's rows after its cursor (:func:`~offsetstore.storage.changes.changes_since`: at
most ``MAX_ROWS`` a page, a few pages a round; ids of transactions still open when they were
passed are read again until they commit or roll back), keeps the changed partitions of
matching groups, reads their latest offsets and writes them. At start it reads again the
last ``START_ROWS`` history rows (what changed just before a restart, or during it).

A best-effort copy, never read back: the store stays the truth. It never slows or fails a
commit: it runs in a thread of the supervisor, on the supervisor's pool. What is pending is
partitions, not commits: a partition changed a thousand times is copied once, at its latest
offset, so one tenant committing in a loop cannot fill a shared queue (issue 34, low). What
is bounded is partitions: ``MAX_PARTITIONS`` a group and ``MAX_PENDING`` in all (a partition
new past either is dropped and counted), and ``max_partitions`` written a round, shared
between the pending groups as the watermark reader shares its rounds (a group's share, the
rest the next round): one tenant's huge group cannot hold back another's. A group Kafka
refuses (it has live members: the coordinator takes offsets from outsiders only for an empty
group), a broker that does not answer or a database that does not is logged (at most once a
minute per group) and counted, and the group's offsets wait for its next change.

It follows each group's Kafka cluster (issue 58): before its first write it asks its cluster's
id (AdminClient ``describe_cluster``), and it writes only the groups bound to that cluster
(:mod:`~offsetstore.storage.clusters`) or bound to none. A group bound to another cluster is
skipped (counted, logged once per group and cluster): its offsets are positions in that
cluster's logs and mean nothing here. The binding is read when the group is written, so a
switch to this cluster (``groups switch``: one reset whose history rows the mirror reads as any
other, in the transaction that rebinds the group) is written with the group's switched offsets.
A failed write makes it ask the id again before the next one (the address may now reach
another cluster).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter

from offsetstore.runtime.held_lock import HeldLock
from offsetstore.runtime.store import Store
from offsetstore.server._mirror_cluster import MirrorCluster
from offsetstore.storage.changes import ChangePage, bound_and_latest_offsets, changes_since, history_end

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

__all__ = ["KafkaMirror", "parse_prefixes"]

log = logging.getLogger(__name__)

#: Partitions (of every group) waiting to be written at most; beyond, new ones are dropped (and counted).
MAX_PENDING = 100_000
#: Partitions a group's pending offsets hold at most (the contract's widest commit).
MAX_PARTITIONS = 10_000
#: Partitions written a round at most, shared between the pending groups.
MAX_PARTITIONS_A_ROUND = 10_000
#: History rows one read takes at most (whoever wrote them).
MAX_ROWS = 10_000
#: History reads a round at most (a full page is followed by the next at once).
MAX_PAGES = 10
#: History rows a starting mirror reads again (what changed just before, or while, no mirror ran).
START_ROWS = 10_000
#: Ranges of unseen history ids (transactions still open) remembered at most; beyond, the oldest is given up.
MAX_HOLES = 1_000
#: Key of the advisory lock its mirror holds: one mirror a database, whatever the servers.
MIRROR_LOCK_ID = 0x6F66_6673_6574_0003
#: Seconds one round waits for Kafka's answers (a broker that is down answers nothing).
REQUEST_SECONDS = 10.0
#: Seconds between two warnings about the same group.
WARN_EVERY = 60.0


def parse_prefixes(value: str) -> tuple[str, ...]:
    """``"spark-,etl."`` -> ("spark-", "etl."); empty entries are ignored."""
    return tuple(p.strip() for p in value.split(",") if p.strip())


@dataclass
class _Hole:
    """History ids ``low..high`` not seen yet; settled once the snapshot's oldest running transaction is ``tag`` or newer."""

    low: int
    high: int
    tag: int


class KafkaMirror:
    """Copies the stored offsets of matching groups into Kafka, from the store's history, from a thread of its own.

    ``store`` is the database it reads (any writer's commits). ``admin`` is made from
    ``bootstrap`` (and ``config``, extra librdkafka settings such as ``security.protocol``)
    unless given. ``registry`` receives the mirror's counters.
    """

    def __init__(
        self,
        store: Store,
        bootstrap: str,
        prefixes: Sequence[str],
        interval: float = 5.0,
        *,
        config: Mapping[str, Any] | None = None,
        registry: CollectorRegistry | None = None,
        admin: AdminClient | None = None,
        max_pending: int = MAX_PENDING,
        max_partitions: int = MAX_PARTITIONS_A_ROUND,
        max_rows: int = MAX_ROWS,
        request_seconds: float = REQUEST_SECONDS,
    ) -> None:
        if not prefixes:
            raise ValueError("the mirror needs at least one group prefix (--mirror-kafka-groups)")
        if interval <= 0 or max_partitions < 1 or max_rows < 1:
            raise ValueError("the mirror interval must be above 0, the partitions a round and rows a page at least 1")
        self.store = store
        self.prefixes = tuple(prefixes)
        self.interval = interval
        self.request_seconds = request_seconds
        self._settings: dict[str, str | int | float | bool] = {
            "bootstrap.servers": bootstrap,
            "socket.timeout.ms": int(request_seconds * 1000),
            # librdkafka would print every failed connection to stderr, once a second while a
            # broker is down; the mirror logs its failures itself, at most once a minute a group.
            "log_level": 2,
        }
        self._settings.update(config or {})
        self._admin = admin
        self.max_pending = max_pending
        self.max_partitions = max_partitions
        self.max_rows = max_rows
        # The last history id read (None: not started), and the ids below it not seen yet.
        self._cursor: int | None = None
        self._holes: list[_Hole] = []
        # group -> its changed partitions (an ordered set), oldest group first.
        self._pending: dict[str, dict[tuple[str, int], None]] = {}
        self._pending_count = 0
        self._warned: dict[str, float] = {}
        self._lock = HeldLock(store.aio, MIRROR_LOCK_ID, "the kafka mirror")
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.registry = registry = registry if registry is not None else CollectorRegistry()
        self.mirrored = Counter(
            "offsetstore_kafka_mirror_offsets",
            "Partition offsets the Kafka mirror wrote to a group coordinator.",
            registry=registry,
        )
        self.failures = Counter(
            "offsetstore_kafka_mirror_failures",
            "Group writes the Kafka mirror could not make (broker unreachable, group with live members, "
            "database unreachable, ...).",
            registry=registry,
        )
        self.dropped = Counter(
            "offsetstore_kafka_mirror_dropped_commits",
            "Changed partitions the Kafka mirror dropped: as many partitions as it holds were pending "
            "(or a group's share of them); the group's next change brings them back.",
            registry=registry,
        )
        self.cluster = MirrorCluster(registry, MAX_PENDING)

    @property
    def cluster_id(self) -> str | None:
        """The id of the Kafka cluster it writes to (None: not asked yet, or to ask again after a failure)."""
        return self.cluster.id

    @property
    def pending_partitions(self) -> int:
        """Changed partitions read from the history and not yet written (beyond the last round's shares)."""
        return self._pending_count

    def start_client(self) -> KafkaMirror:
        """Makes the Kafka client (no thread: :meth:`round` runs when called)."""
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient(self._settings)
        return self

    def start(self) -> KafkaMirror:
        self.start_client()
        self._thread = threading.Thread(target=self._loop, name="offsetstore-kafka-mirror", daemon=True)
        self._thread.start()
        log.info("kafka mirror started", extra={"prefixes": ",".join(self.prefixes), "interval": self.interval})
        return self

    def stop(self, wait: float = 5.0) -> None:
        """Mirrors what is pending (one last round), stops the thread and gives the lock up (another server's turn).

        Waits ``wait`` seconds at most for the last round: a round waiting for a broker that is
        down is abandoned (its thread is a daemon), so a stop never waits out Kafka's timeout.
        """
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(wait)
            self._thread = None
        try:
            self.store.wait(self._lock.release())
        except Exception as error:  # the database is gone: so is the lock
            log.info("kafka mirror: lock not released: %s", error)

    def _loop(self) -> None:
        while True:
            started = time.monotonic()
            behind = self.round()
            if self._stopping.is_set():
                return
            if not behind:
                self._stopping.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def round(self) -> bool:
        """One round: the history's new rows, then a fair share of the pending partitions to Kafka.

        Returns True when the history has more rows than the round read (the next round
        starts at once). Does nothing while another server's mirror holds the lock.
        """
        try:
            ours = self.store.wait(self._lock.hold())
        except Exception as error:
            self._failed("(lock)", error)
            ours = False
        if not ours:  # another mirror runs; when this one takes over, it starts over
            self._cursor, self._holes, self._pending, self._pending_count = None, [], {}, 0
            self.cluster.id = None
            return False
        try:
            behind = self._read_history()
        except Exception as error:  # the database is down: the cursor stays, the next round reads again
            self._failed("(history)", error)
            behind = False
        if self._pending and self._know_cluster():  # else the pending partitions wait for the next round
            self._write(self._take_share())
        return behind

    def _know_cluster(self) -> bool:
        """Asks the cluster's id once (and again after a failed write); False when the broker does not answer."""
        if self.cluster.id is not None:
            return True
        try:
            assert self._admin is not None, "start() first"
            self.cluster.ask(self._admin, self.request_seconds)
        except Exception as error:
            self._failed("(cluster)", error)
            return False
        return True

    def _read_history(self) -> bool:
        if self._cursor is None:
            self._cursor = max(0, self.store.run(history_end) - START_ROWS)
        for _ in range(MAX_PAGES):
            if self._pending_count >= self.max_pending:
                return True  # written first; nothing is lost: the history keeps it
            page = self.store.run(
                changes_since,
                self._cursor,
                [(h.low, h.high) for h in self._holes],
                self.prefixes,
                self.max_rows,
            )
            self._follow(page)
            if len(page.after) < self.max_rows:
                return False
        return True

    def _follow(self, page: ChangePage) -> None:
        """Moves the cursor past ``page``, keeps its unseen ids as holes, settles the holes, pends the wanted changes."""
        assert self._cursor is not None
        found = sorted(c.id for c in page.in_holes)
        holes: list[_Hole] = []
        for hole in self._holes:
            low = hole.low
            for id_ in (i for i in found if hole.low <= i <= hole.high):
                if id_ > low:
                    holes.append(_Hole(low, id_ - 1, hole.tag))
                low = id_ + 1
            if low <= hole.high:
                holes.append(_Hole(low, hole.high, hole.tag))
        # Every transaction running when a hole was found has ended: what it still lacks was rolled back.
        holes = [h for h in holes if page.xmin < h.tag]
        seen = self._cursor
        for change in page.after:
            if change.id > seen + 1:
                holes.append(_Hole(seen + 1, change.id - 1, page.xmax))
            seen = change.id
        self._cursor = seen
        if len(holes) > MAX_HOLES:
            given_up = holes[: len(holes) - MAX_HOLES]
            holes = holes[len(holes) - MAX_HOLES :]
            log.warning(
                "kafka mirror: %d ranges of history ids still unseen; gave up the oldest %d (ids %d..%d): "
                "a long transaction's changes there reach Kafka with the group's next change",
                len(holes) + len(given_up),
                len(given_up),
                given_up[0].low,
                given_up[-1].high,
            )
        self._holes = holes
        for change in (*page.in_holes, *page.after):
            if change.group_id is not None:
                self._pend(change.group_id, (change.topic, change.partition))

    def _pend(self, group_id: str, key: tuple[str, int]) -> None:
        partitions = self._pending.setdefault(group_id, {})
        if key in partitions:
            return
        if len(partitions) >= MAX_PARTITIONS or self._pending_count >= self.max_pending:
            self.dropped.inc()
            return
        partitions[key] = None
        self._pending_count += 1

    def _take_share(self) -> dict[str, list[tuple[str, int]]]:
        """This round's partitions: ``max_partitions`` shared between the pending groups, oldest groups first.

        A group with more than its share keeps the rest, and goes behind the others for the
        next round; beyond ``max_partitions`` groups, the groups take turns.
        """
        if not self._pending:
            return {}
        groups = list(self._pending)[: self.max_partitions]
        share = max(1, self.max_partitions // len(groups))
        taken: dict[str, list[tuple[str, int]]] = {}
        for group_id in groups:
            partitions = self._pending.pop(group_id)
            keys = list(partitions)
            taken[group_id] = keys[:share]
            if len(keys) > share:
                self._pending[group_id] = dict.fromkeys(keys[share:])
        self._pending_count -= sum(len(k) for k in taken.values())
        return taken

    def _write(self, taken: dict[str, list[tuple[str, int]]]) -> None:
        """Each group's latest offsets in one request, all of them in flight together."""
        if not taken:
            return
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        try:
            bound, latest = self.store.run(bound_and_latest_offsets, taken)
        except Exception as error:
            self._failed("(offsets)", error)
            return
        futures: dict[str, Any] = {}
        for group_id, keys in taken.items():
            if not self.cluster.takes(group_id, bound.get(group_id)):
                continue
            # Sentinels (-2/-1 of a reset without watermarks) have no Kafka equivalent to write;
            # a deleted offset is not written either.
            partitions = [
                TopicPartition(t, p, o) for t, p in sorted(keys) if (o := latest.get((group_id, t, p), -1)) >= 0
            ]
            if not partitions:
                continue
            try:
                # One group a request: what the admin API takes.
                assert self._admin is not None, "start() first"
                (futures[group_id],) = self._admin.alter_consumer_group_offsets(
                    [ConsumerGroupTopicPartitions(group_id, partitions)], request_timeout=self.request_seconds
                ).values()
            except Exception as error:  # a bad argument, a closed client: this group fails, the others go on
                self._failed(group_id, error)
        for group_id, future in futures.items():
            try:
                result = future.result(timeout=self.request_seconds + 5)
                errors = [tp for tp in result.topic_partitions if tp.error is not None]
                if errors:
                    raise RuntimeError(f"{len(errors)} partitions refused, first: {errors[0].error}")
                self.mirrored.inc(len(result.topic_partitions))
            except Exception as error:
                self._failed(group_id, error)
                self.cluster.id = None  # asked again: the address may reach another cluster now

    def _failed(self, group_id: str, error: BaseException) -> None:
        self.failures.inc()
        now = time.monotonic()
        if now - self._warned.get(group_id, -WARN_EVERY) >= WARN_EVERY:
            self._warned[group_id] = now
            log.warning("kafka mirror could not write the group's offsets: %s", error, extra={"group_id": group_id})
