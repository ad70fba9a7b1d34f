"""Commit latency with the server's Kafka watermark reader on and its broker down, against the reader off, in one run.

Two ``offsetstore serve`` processes over one PostgreSQL: one without the reader, one whose
supervisor reads the watermarks of every ``bench-`` group's partitions from a Kafka address
where nothing listens (a broker that is down), every second. Rounds alternate between them;
each round, ``--clients`` threads commit one partition of a group of their own, call after
call. Prints p50/p99 of each and their ratios; nothing is asserted (issue 36: a broker that
is down costs commits nothing).

Usage: ``python bench/kafka_watermarks.py [--rounds 6] [--commits 400] [--clients 4]``
(``OFFSETSTORE_BENCH_DATABASE_URL`` selects a PostgreSQL; otherwise an embedded one).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import statistics
import threading
import time
import uuid

from _server import served


def unused_address() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"  # closed again: nothing listens there


def one_round(address: str, commits: int, clients: int) -> list[float]:
    from offsetstore.client import OffsetStoreClient

    latencies: list[float] = []
    lock = threading.Lock()

    def commit_loop() -> None:
        group, mine = f"bench-{uuid.uuid4().hex[:10]}", []
        with OffsetStoreClient(address) as client:
            client.commit_offsets(group, {("orders", 0): 0})
            for i in range(1, commits + 1):
                started = time.perf_counter()
                client.commit_offsets(group, {("orders", 0): i})
                mine.append(time.perf_counter() - started)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=commit_loop) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies


def ms(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=1000)[int(q * 1000) - 1] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--commits", type=int, default=400, help="commits per client per round")
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args()
    down = unused_address()
    reader = ("--watermarks-kafka-bootstrap", down, "--watermarks-kafka-groups", "bench-")
    reader += ("--watermarks-kafka-interval", "1s")
    with contextlib.ExitStack() as stack:
        off = stack.enter_context(served(prefix="offsetstore-bench-watermarks-off-"))
        os.environ.setdefault("OFFSETSTORE_BENCH_DATABASE_URL", off.database_url)
        on = stack.enter_context(served(extra_args=reader, prefix="offsetstore-bench-watermarks-on-"))
        names = ("reader off", "reader on, broker down")
        found: dict[str, list[float]] = {name: [] for name in names}
        for r in range(args.rounds):
            order = [(names[0], off), (names[1], on)]
            for name, server in order if r % 2 == 0 else order[::-1]:
                found[name].extend(one_round(server.address, args.commits, args.clients))
        base = found[names[0]]
        print(
            f"{args.rounds} rounds x {args.clients} clients x {args.commits} commits of one partition; load {os.getloadavg()}"
        )
        for name, values in found.items():
            print(
                f"{name:24} n={len(values):6}  p50 {ms(values, 0.5):6.2f} ms  p99 {ms(values, 0.99):6.2f} ms  "
                f"p99/off {ms(values, 0.99) / ms(base, 0.99):.2f}x  p50/off {ms(values, 0.5) / ms(base, 0.5):.2f}x"
            )
        print(f"reader log lines (broker {down}):")
        for line in on.log.read_text().splitlines():
            if "watermarks" in line:
                print("  " + line[:200])


if __name__ == "__main__":
    main()
