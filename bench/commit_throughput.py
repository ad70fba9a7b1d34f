"""Commit throughput through the server, as ratios to baselines measured in the same run.

Runs ``offsetstore serve`` as a separate process over one PostgreSQL and drives it
with N concurrent clients (spread over worker processes so the client's GIL is not
the bottleneck), each committing single-partition offsets to its own group. In the
same run it measures:

- ``psycopg``: the same upsert issued directly with psycopg on the same database
  (what PostgreSQL itself can take);
- ``echo``: grpc.health.v1 Check on the same server (the transport's ceiling).

Usage: ``python bench/commit_throughput.py [--clients 64] [--seconds 10]``
(``OFFSETSTORE_BENCH_DATABASE_URL`` selects a PostgreSQL; otherwise an embedded one).
"""

from __future__ import annotations

import argparse
import multiprocessing
import socket
import statistics
import threading
import time
import uuid

from _server import served

UPSERT = (
    "INSERT INTO offsetstore.offsets (group_id, topic, partition, \"offset\", metadata) VALUES (%s, %s, %s, %s, '') "
    'ON CONFLICT (group_id, topic, partition) DO UPDATE SET "offset" = EXCLUDED."offset", commit_time = now()'
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(kind: str, target: str, threads: int, seconds: float, tag: str, out: multiprocessing.Queue) -> None:
    latencies: list[float] = []
    lock = threading.Lock()
    stop_at = time.perf_counter() + seconds

    def loop(i: int) -> None:
        mine: list[float] = []
        group = f"bench-{tag}-{i}"
        if kind == "psycopg":
            import psycopg

            from offsetstore.server.migrate import normalize_url

            url = normalize_url(target).replace("postgresql+psycopg://", "postgresql://")
            with psycopg.connect(url, autocommit=True) as conn:
                n = 0
                while time.perf_counter() < stop_at:
                    n += 1
                    t = time.perf_counter()
                    conn.execute(UPSERT, (group, "bench", 0, n))
                    mine.append(time.perf_counter() - t)
        else:
            import grpc
            from grpc_health.v1 import health_pb2, health_pb2_grpc

            from offsetstore.v1 import offset_store_pb2 as pb
            from offsetstore.v1 import offset_store_pb2_grpc as pb_grpc

            channel = grpc.insecure_channel(target)
            stub = pb_grpc.OffsetStoreServiceStub(channel)
            health = health_pb2_grpc.HealthStub(channel)
            n = 0
            while time.perf_counter() < stop_at:
                n += 1
                t = time.perf_counter()
                if kind == "commit":
                    stub.CommitOffsets(
                        pb.CommitOffsetsRequest(
                            group_id=group, offsets=[pb.OffsetCommit(topic="bench", partition=0, offset=n)]
                        ),
                        timeout=30,
                    )
                else:
                    health.Check(health_pb2.HealthCheckRequest(), timeout=30)
                mine.append(time.perf_counter() - t)
            channel.close()
        with lock:
            latencies.extend(mine)

    pool = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    out.put(latencies)


def measure(kind: str, target: str, clients: int, seconds: float, processes: int) -> dict[str, float]:
    ctx = multiprocessing.get_context("spawn")
    out: multiprocessing.Queue = ctx.Queue()
    tag = uuid.uuid4().hex[:8]
    per = [clients // processes + (1 if i < clients % processes else 0) for i in range(processes)]
    workers = [
        ctx.Process(target=_worker, args=(kind, target, n, seconds, f"{tag}-{i}", out)) for i, n in enumerate(per) if n
    ]
    for w in workers:
        w.start()
    latencies = [x for _ in workers for x in out.get()]
    for w in workers:
        w.join()
    latencies.sort()
    return {
        "per_s": len(latencies) / seconds,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--processes", type=int, default=2, help="client processes")
    parser.add_argument("--max-workers", type=int, default=64, help="server RPC threads")
    parser.add_argument("--pool-size", type=int, default=32, help="server database connections")
    args = parser.parse_args()

    with served(max_workers=args.max_workers, pool_size=args.pool_size) as server:
        print(f"{args.clients} clients, {args.seconds:.0f} s each, {args.processes} client processes")
        results = {}
        for kind, target in (("psycopg", server.database_url), ("echo", server.address), ("commit", server.address)):
            results[kind] = r = measure(kind, target, args.clients, args.seconds, args.processes)
            print(f"{kind:>8}: {r['per_s']:8.0f}/s  p50 {r['p50_ms']:6.2f} ms  p99 {r['p99_ms']:6.2f} ms")
        commit = results["commit"]["per_s"]
        print(f"commit / psycopg upsert: {commit / results['psycopg']['per_s']:.2f}")
        print(f"commit / echo RPC:       {commit / results['echo']['per_s']:.2f}")


if __name__ == "__main__":
    main()
