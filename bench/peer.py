"""Synchronous offset commits against the peer users would pick instead: Kafka's group coordinator, same run.

Two stores of consumer offsets, measured side by side with the same committers:

- ``kafka``: a local Apache Kafka broker (KRaft, ``KafkaCluster`` of the tests) whose log
  is fsynced at every append (``log.flush.interval.messages=1``, ``__consumer_offsets``
  included): the durability PostgreSQL's ``synchronous_commit = on`` gives a commit.
  Each committer is a confluent-kafka ``Consumer`` of a group of its own that commits an
  explicit offset of one partition with ``commit(asynchronous=False)``;
- ``offsetstore``: ``offsetstore serve`` with its defaults over one PostgreSQL (embedded, or
  ``OFFSETSTORE_BENCH_DATABASE_URL``); each committer an ``OffsetStoreClient`` committing
  one partition of a group of its own with ``commit_offsets``.

``--committers`` threads (default 16) over ``--client-processes`` processes, each thread
one client of its own calling in a loop, a call at a time. The two sides alternate for
``--rounds`` rounds (which goes first alternates too), so that a machine whose load
changes weighs on both alike. Per round and in sum: the rate, p50 and p99 latency, the
CPU each side's serving processes spent per commit (Kafka's JVM; the server's process
tree and, where it runs here, PostgreSQL's) and the clients' CPU per commit, with the load
average; then offsetstore ÷ Kafka. Timings are printed, never asserted.

Usage: ``python bench/peer.py [--committers 16] [--seconds 6] [--rounds 3]`` (``make bench-peer``).
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _server import served  # noqa: E402
from rpc_throughput import load_average, postmaster_pid, tree_cpu_seconds  # noqa: E402

SIDES = ("kafka", "offsetstore")
#: Commits each committer makes before the window opens (a Kafka consumer finds its
#: coordinator; a group is created in the store).
WARM_UP = 5
#: Broker settings of the run: every append to every log (``__consumer_offsets`` too) fsynced.
FSYNC_EVERY_APPEND = {"log.flush.interval.messages": 1}


def _committer(side: str, target: str, topic: str, group: str) -> object:
    """A function committing offset ``n`` of partition 0 of ``topic`` for ``group``, synchronously."""
    if side == "kafka":
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(
            {"bootstrap.servers": target, "group.id": group, "enable.auto.commit": False, "log_level": 3}
        )

        def commit(n: int) -> None:
            consumer.commit(offsets=[TopicPartition(topic, 0, n)], asynchronous=False)

        commit.close = consumer.close  # type: ignore[attr-defined]
        return commit
    from offsetstore.client import OffsetStoreClient

    client = OffsetStoreClient(target, timeout=30)

    def commit(n: int) -> None:
        client.commit_offsets(group, {(topic, 0): n})

    commit.close = client.close  # type: ignore[attr-defined]
    return commit


def _worker(
    side: str,
    target: str,
    topic: str,
    groups: list[str],
    commands: multiprocessing.Queue,
    out: multiprocessing.Queue,
) -> None:
    """One committer per group, kept for the whole run; for each window asked, one thread per committer.

    Sends back, for each window, the latencies of the commits that began and ended in it,
    this process's CPU seconds and the errors met.
    """
    errors: list[str] = []
    committers = []
    for group in groups:
        try:
            commit = _committer(side, target, topic, group)
            for n in range(1, WARM_UP + 1):
                commit(n)  # type: ignore[operator]
            committers.append(commit)
        except Exception as e:  # noqa: BLE001 - reported; the run goes on without it
            errors.append(f"{side} {group}: {e!r}")
    out.put(errors)
    offsets = [WARM_UP] * len(committers)
    while (window := commands.get()) is not None:
        start, end = window
        found: list[list[float]] = [[] for _ in committers]
        errors = []

        def run(
            i: int, start: float = start, end: float = end, found: list[list[float]] = found, errors: list[str] = errors
        ) -> None:
            commit, mine = committers[i], found[i]
            time.sleep(max(0.0, start - time.monotonic()))
            try:
                while (now := time.monotonic()) < end:
                    offsets[i] += 1
                    commit(offsets[i])  # type: ignore[operator]
                    done = time.monotonic()
                    if now >= start and done <= end:
                        mine.append(done - now)
            except Exception as e:  # noqa: BLE001
                errors.append(f"{side}: {e!r}")

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(committers))]
        cpu = time.process_time()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        out.put(([x for mine in found for x in mine], time.process_time() - cpu, errors))
    for commit in committers:
        commit.close()  # type: ignore[attr-defined]


@dataclass
class Phase:
    side: str
    latencies: list[float]
    seconds: float
    serving_cpu: float  # the side's serving processes, CPU seconds in the window
    database_cpu: float
    client_cpu: float
    load: str
    errors: list[str]

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.seconds


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, int(len(ordered) * q) - 1)] if ordered else float("nan")


class Committers:
    """One side's committers, one per group over ``processes`` processes, started once and measured window by window.

    ``serving_pid``: the process (tree) whose CPU is the side's serving cost; ``database_pid``
    a local PostgreSQL's postmaster, or 0.
    """

    def __init__(
        self, side: str, target: str, topic: str, groups: list[str], processes: int, serving_pid: int, database_pid: int
    ) -> None:
        self.side = side
        self._serving_pid, self._database_pid = serving_pid, database_pid
        ctx = multiprocessing.get_context("spawn")
        self._out: multiprocessing.Queue = ctx.Queue()
        shares = [share for share in (groups[i::processes] for i in range(processes)) if share]
        self._commands = [ctx.Queue() for _ in shares]
        self._workers = [
            ctx.Process(target=_worker, args=(side, target, topic, share, commands, self._out))
            for share, commands in zip(shares, self._commands, strict=True)
        ]
        for w in self._workers:
            w.start()
        self.errors = [e for _ in self._workers for e in self._out.get(timeout=180)]

    def window(self, seconds: float) -> Phase:
        """Every committer commits in a loop for ``seconds``; what it gave."""
        load = load_average()
        # A short lead, so that every thread has its window before it opens.
        start = time.monotonic() + 0.3
        end = start + seconds
        for commands in self._commands:
            commands.put((start, end))
        time.sleep(max(0.0, start - time.monotonic()))
        serving = tree_cpu_seconds(self._serving_pid)
        database = tree_cpu_seconds(self._database_pid) if self._database_pid else 0.0
        time.sleep(max(0.0, end - time.monotonic()))
        serving = tree_cpu_seconds(self._serving_pid) - serving
        database = tree_cpu_seconds(self._database_pid) - database if self._database_pid else 0.0
        answers = [self._out.get(timeout=120) for _ in self._workers]
        return Phase(
            side=self.side,
            latencies=[x for found, _, _ in answers for x in found],
            seconds=seconds,
            serving_cpu=serving,
            database_cpu=database,
            client_cpu=sum(spent for _, spent, _ in answers),
            load=load,
            errors=[e for _, _, found in answers for e in found],
        )

    def close(self) -> None:
        for commands in self._commands:
            commands.put(None)
        for w in self._workers:
            w.join(30)
            if w.is_alive():
                w.kill()


def _us(cpu: float, calls: int) -> str:
    return f"{cpu / calls * 1e6:,.0f} µs" if calls and cpu else ""


def row(name: str, phases: list[Phase]) -> str:
    """Rate, p50, p99 and CPU per commit of ``phases`` taken together."""
    latencies = [x for p in phases for x in p.latencies]
    calls = len(latencies)
    seconds = sum(p.seconds for p in phases)
    serving = sum(p.serving_cpu for p in phases)
    database = sum(p.database_cpu for p in phases)
    clients = sum(p.client_cpu for p in phases)
    return (
        f"| {name} | {calls / seconds:,.0f}/s | {percentile(latencies, 0.5) * 1e3:.1f} ms "
        f"| {percentile(latencies, 0.99) * 1e3:.1f} ms | {_us(serving, calls)} | {_us(database, calls)} "
        f"| {_us(serving + database, calls)} | {_us(clients, calls)} |"
    )


HEADER = (
    "| | rate | p50 | p99 | serving process CPU per commit | PostgreSQL's | both | clients' |\n"
    "|---|---|---|---|---|---|---|---|"
)


def database_settings(url: str) -> str:
    import psycopg

    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as conn:
        found = conn.execute(
            "SELECT current_setting('server_version'), current_setting('fsync'), "
            "current_setting('wal_sync_method'), current_setting('synchronous_commit')"
        ).fetchone()
    assert found is not None
    version, fsync, method, synchronous = found
    # The server sets synchronous_commit = on in every store transaction (storage/engine.py) whatever the default.
    return (
        f"PostgreSQL {version} (fsync={fsync}, wal_sync_method={method}; the store commits with synchronous_commit=on)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--committers", type=int, default=16, help="concurrent synchronous committers (default 16)")
    parser.add_argument("--seconds", type=float, default=6, help="each side's window per round (default 6)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, each side once a round (default 3)")
    parser.add_argument("--warm-up", type=float, default=3, help="an unmeasured warm-up window's seconds (default 3)")
    parser.add_argument(
        "--warm-up-windows", type=int, default=6, help="at most this many a side, until the rate stops rising (6)"
    )
    parser.add_argument("--client-processes", type=int, default=2, help="processes the committers are spread over")
    args = parser.parse_args()

    from offsetstore.kafka_integration.local_kafka import KAFKA_VERSION, KafkaCluster, KafkaUnavailable

    started = time.monotonic()
    print(f"start: {load_average()}; {os.cpu_count()} cores", flush=True)
    with contextlib.ExitStack() as stack:
        try:
            kafka = stack.enter_context(KafkaCluster(1, config=FSYNC_EVERY_APPEND))
        except KafkaUnavailable as e:
            sys.exit(f"peer: {e}")
        server = stack.enter_context(served(prefix="offsetstore-bench-peer-"))
        database = postmaster_pid(server.database_url.replace("postgresql+psycopg://", "postgresql://"))
        if os.environ.get("OFFSETSTORE_BENCH_DATABASE_URL"):
            database = 0  # a shared PostgreSQL: its process tree serves others too
        topic = f"peer-{uuid.uuid4().hex[:8]}"
        kafka.create_topic(topic, 1)
        print(f"Kafka {KAFKA_VERSION}, one broker, log.flush.interval.messages=1 (fsync every append)")
        print(database_settings(server.database_url))
        print(
            f"{args.committers} synchronous committers over {args.client_processes} processes, each its own group, "
            f"one partition; {args.rounds} rounds of {args.seconds:g} s a side (ready in "
            f"{time.monotonic() - started:.0f} s)\n",
            flush=True,
        )
        groups = {side: [f"peer-{side}-{uuid.uuid4().hex[:6]}-{i}" for i in range(args.committers)] for side in SIDES}
        targets = {
            "kafka": (kafka.bootstrap, kafka.pid(1), 0),
            "offsetstore": (server.address, server.process.pid, database),
        }
        sides = {}
        for side, (target, serving, db) in targets.items():
            sides[side] = Committers(side, target, topic, groups[side], args.client_processes, serving, db)
            stack.callback(sides[side].close)
            for e in sides[side].errors[:3]:
                print(f"    error: {e}")
        # Unmeasured windows until a side's rate stops rising: Kafka's JVM compiles its hot paths
        # under the first seconds of load (a cold first window came out at a third to a half of
        # the next ones' rate, more so on a loaded machine).
        for side in SIDES:
            rates: list[float] = []
            while len(rates) < args.warm_up_windows:
                rates.append(sides[side].window(args.warm_up).rate)
                if len(rates) > 1 and rates[-1] < 1.1 * rates[-2]:
                    break
            print(f"warm-up {side:>11}: {', '.join(f'{x:,.0f}/s' for x in rates)} ({args.warm_up:g} s each)")
        print(flush=True)
        phases: dict[str, list[Phase]] = {side: [] for side in SIDES}
        ratios: list[float] = []
        for r in range(args.rounds):
            order = SIDES if r % 2 == 0 else tuple(reversed(SIDES))
            for side in order:
                phase = sides[side].window(args.seconds)
                phases[side].append(phase)
                print(f"round {r + 1} {side:>11}: {len(phase.latencies) / phase.seconds:8,.0f}/s  "
                      f"p50 {percentile(phase.latencies, 0.5) * 1e3:5.1f} ms  "
                      f"p99 {percentile(phase.latencies, 0.99) * 1e3:6.1f} ms  ({phase.load})", flush=True)  # fmt: skip
                for e in phase.errors[:3]:
                    print(f"    error: {e}")
            ratios.append(phases["offsetstore"][-1].rate / phases["kafka"][-1].rate)
        print(f"\nall rounds together; end: {load_average()}\n")
        print(HEADER)
        print(row(f"Kafka {KAFKA_VERSION}, fsync every append", phases["kafka"]))
        print(row("offsetstore CommitOffsets", phases["offsetstore"]))

        def pooled(side: str, q: float) -> float:
            return percentile([x for p in phases[side] for x in p.latencies], q)

        rate = {
            side: sum(len(p.latencies) for p in phases[side]) / sum(p.seconds for p in phases[side]) for side in SIDES
        }
        print("\noffsetstore ÷ Kafka, same run:")
        print(
            f"- rate ×{rate['offsetstore'] / rate['kafka']:.2f} (per round: {', '.join(f'×{x:.2f}' for x in ratios)})"
        )
        print(f"- p50 ×{pooled('offsetstore', 0.5) / pooled('kafka', 0.5):.2f}")
        print(f"- p99 ×{pooled('offsetstore', 0.99) / pooled('kafka', 0.99):.2f}")
        kafka_cpu = sum(p.serving_cpu for p in phases["kafka"]) / sum(len(p.latencies) for p in phases["kafka"])
        ours = sum(p.serving_cpu + p.database_cpu for p in phases["offsetstore"]) / sum(
            len(p.latencies) for p in phases["offsetstore"]
        )
        if database:
            print(f"- serving CPU per commit (server + PostgreSQL ÷ Kafka's JVM) ×{ours / kafka_cpu:.2f}")
        print(f"\n(took {time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
