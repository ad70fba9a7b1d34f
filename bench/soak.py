"""Soak: sustained commits through ``offsetstore serve`` for minutes; throughput, errors and memory over time.

Runs the server as a separate process over one PostgreSQL and drives it with K concurrent
clients (spread over worker processes so the client's GIL is not the bottleneck), each
committing increasing offsets to its own group without pause. Every interval it prints the
commit rate, the errors by gRPC status code and the server's resident memory; at the end,
ratios against the run's own first interval (throughput) and its memory after warm-up,
and whether every acknowledged commit is stored.

Not a pass/fail test: a leak shows as an RSS ratio that keeps growing with --minutes, a
slowdown as a throughput ratio well below 1.

Usage: ``python bench/soak.py [--minutes 3] [--clients 16] [--interval 10]``
(``OFFSETSTORE_BENCH_DATABASE_URL`` selects a PostgreSQL; otherwise an embedded one).
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing
import queue
import socket
import threading
import time
import uuid

from _server import served

MIB = 1024 * 1024


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rss(pid: int) -> int:
    """Resident set size of a process, from /proc (Linux) or psutil."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import psutil

    return psutil.Process(pid).memory_info().rss


def _worker(
    index: int, target: str, threads: int, seconds: float, partitions: int, tag: str, out: multiprocessing.Queue
) -> None:
    """Commits without pause from ``threads`` threads; reports cumulative counts every second."""
    import grpc

    from offsetstore.v1 import offset_store_pb2 as pb
    from offsetstore.v1 import offset_store_pb2_grpc as pb_grpc

    lock = threading.Lock()
    ok = 0
    errors: collections.Counter[str] = collections.Counter()
    acknowledged: dict[str, int] = {}
    stop_at = time.monotonic() + seconds

    def loop(i: int) -> None:
        nonlocal ok
        group = f"soak-{tag}-{index}-{i}"
        channel = grpc.insecure_channel(target)
        stub = pb_grpc.OffsetStoreServiceStub(channel)
        n = 0
        while time.monotonic() < stop_at:
            n += 1
            request = pb.CommitOffsetsRequest(
                group_id=group,
                offsets=[pb.OffsetCommit(topic="soak", partition=p, offset=n) for p in range(partitions)],
            )
            try:
                stub.CommitOffsets(request, timeout=30)
            except grpc.RpcError as error:
                with lock:
                    errors[error.code().name] += 1  # type: ignore[attr-defined]
                time.sleep(0.05)
                continue
            with lock:
                ok += 1
                acknowledged[group] = n
        channel.close()

    pool = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(threads)]
    for t in pool:
        t.start()
    while any(t.is_alive() for t in pool):
        time.sleep(1)
        with lock:
            out.put(("progress", index, ok, dict(errors)))
    with lock:
        out.put(("done", index, ok, dict(errors), dict(acknowledged)))


def _stored(url: str, tag: str) -> dict[str, int]:
    """The stored offset of partition 0 of every group of this run."""
    import sqlalchemy as sa
    from sqlalchemy.pool import NullPool

    engine = sa.create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text(
                    'SELECT group_id, "offset" FROM offsetstore.offsets '
                    "WHERE group_id LIKE :p AND topic = 'soak' AND partition = 0"
                ),
                {"p": f"soak-{tag}-%"},
            )
            return {g: int(o) for g, o in rows}
    finally:
        engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=3, help="how long to commit (default 3)")
    parser.add_argument("--clients", type=int, default=16, help="concurrent committers (default 16)")
    parser.add_argument("--processes", type=int, default=2, help="client processes (default 2)")
    parser.add_argument("--interval", type=float, default=10, help="seconds between report lines (default 10)")
    parser.add_argument("--partitions", type=int, default=1, help="partitions per commit (default 1)")
    parser.add_argument("--max-workers", type=int, default=32, help="server RPC threads (default 32)")
    parser.add_argument("--pool-size", type=int, default=16, help="server database connections (default 16)")
    args = parser.parse_args()

    with served(max_workers=args.max_workers, pool_size=args.pool_size, prefix="offsetstore-soak-") as srv:
        server, listen, url = srv.process, srv.address, srv.database_url
        rss_start = _rss(server.pid)
        seconds = args.minutes * 60
        print(
            f"soak: {args.clients} clients in {args.processes} processes, {args.partitions} partition(s) a commit, "
            f"{args.minutes:g} min; server pid {server.pid}, RSS at start {rss_start / MIB:.1f} MiB"
        )

        ctx = multiprocessing.get_context("spawn")
        out: multiprocessing.Queue = ctx.Queue()
        tag = uuid.uuid4().hex[:8]
        per = [
            args.clients // args.processes + (1 if i < args.clients % args.processes else 0)
            for i in range(args.processes)
        ]
        workers = [
            ctx.Process(target=_worker, args=(i, listen, n, seconds, args.partitions, tag, out))
            for i, n in enumerate(per)
            if n
        ]
        for w in workers:
            w.start()

        progress: dict[int, tuple[int, dict[str, int]]] = {}
        acknowledged: dict[str, int] = {}
        done = 0
        started = time.monotonic()
        next_report = started + args.interval
        last_ok, rates, rss_samples = 0, [], []
        while done < len(workers):
            try:
                message = out.get(timeout=max(0.1, next_report - time.monotonic()))
            except queue.Empty:
                message = None
            if message is not None:
                progress[message[1]] = (message[2], message[3])
                if message[0] == "done":
                    done += 1
                    acknowledged.update(message[4])
            now = time.monotonic()
            if now >= next_report or done == len(workers):
                total_ok = sum(ok for ok, _ in progress.values())
                errors: collections.Counter[str] = collections.Counter()
                for _, e in progress.values():
                    errors.update(e)
                elapsed = now - (next_report - args.interval)
                rate = (total_ok - last_ok) / elapsed if elapsed > 0 else 0.0
                rss = _rss(server.pid) if server.poll() is None else 0
                # Workers report once a second: the short tail after the last interval has no rate worth printing.
                if elapsed >= args.interval / 2:
                    rates.append(rate)
                    rss_samples.append(rss)
                    print(
                        f"t={now - started:6.0f}s  commits/s {rate:8.0f}  total {total_ok:9d}  "
                        f"errors {sum(errors.values()):5d} {dict(errors) or ''}  RSS {rss / MIB:7.1f} MiB",
                        flush=True,
                    )
                last_ok = total_ok
                next_report = now + args.interval
        for w in workers:
            w.join()

        total_ok = sum(ok for ok, _ in progress.values())
        errors = collections.Counter()
        for _, e in progress.values():
            errors.update(e)
        rss_end = _rss(server.pid)
        stored = _stored(url, tag)
        lost = sum(1 for g, n in acknowledged.items() if stored.get(g, -1) < n)
        print()
        print(f"commits acknowledged: {total_ok} ({total_ok / seconds:.0f}/s over the run)")
        print(f"errors by code:       {dict(errors) or 'none'}")
        print(f"acknowledged commits missing from the database: {lost} of {len(acknowledged)} groups checked")
        print(
            f"server RSS:           start {rss_start / MIB:.1f} MiB, after the first interval "
            f"{(rss_samples[0] if rss_samples else rss_end) / MIB:.1f} MiB, end {rss_end / MIB:.1f} MiB"
        )
        if len(rates) >= 2 and rates[0] > 0:
            print(f"throughput, last interval / first:   {rates[-1] / rates[0]:.2f}")
            print(f"throughput, slowest interval / first: {min(rates[1:]) / rates[0]:.2f}")
        if rss_samples and rss_samples[0] > 0:
            print(f"RSS, end / after the first interval:  {rss_end / rss_samples[0]:.2f}")


if __name__ == "__main__":
    main()
