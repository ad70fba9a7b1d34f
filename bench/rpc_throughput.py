"""RPC throughput and latency against the transport's own ceiling, all in one run.

Runs ``offsetstore serve`` as a separate process over one PostgreSQL and drives it from
grpc.aio clients spread over client processes (so no client GIL is the bottleneck):

- ``echo``: grpc.health.v1 Check, the transport's ceiling on the stack that ships;
- ``commit1`` / ``commit16``: CommitOffsets of 1 or 16 partitions, each client its own group;
- ``fetch16``: FetchOffsets of a 16-partition group;
- ``describe16``: DescribeGroup of a 16-partition group (only with ``--only``; bench/levers.py uses it).

In the same run it measures PostgreSQL alone (``pg-upsert``, ``pg-fetch16``: prepared
statements over psycopg, autocommit, one connection per client), then, with ``--big``,
fills the store with 1M offsets and 10M history rows and measures the RPCs again.
Rates, p50/p99 and ratios to echo are printed; ``--write-docs`` rewrites the table in
docs/performance.md. Timings are reported, never asserted.

Usage: ``python bench/rpc_throughput.py [--seconds 5] [--concurrency 16 64] [--big] [--write-docs]``
(``OFFSETSTORE_BENCH_DATABASE_URL`` selects a PostgreSQL; otherwise an embedded one).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import platform
import re
import statistics
import time
import uuid
from pathlib import Path

from _server import Served, served

RPCS = ("echo", "commit1", "commit16", "fetch16")
#: Loads measured only where asked for (``--only``, bench/levers.py).
MORE_RPCS = ("describe16",)
PG = ("pg-upsert", "pg-fetch16")

PG_UPSERT = (
    "INSERT INTO offsetstore.offsets (group_id, topic, partition, \"offset\", metadata) VALUES (%s, %s, %s, %s, '') "
    'ON CONFLICT (group_id, topic, partition) DO UPDATE SET "offset" = EXCLUDED."offset", '
    "commit_time = statement_timestamp()"
)
PG_FETCH = 'SELECT topic, partition, "offset", metadata, commit_time FROM offsetstore.offsets WHERE group_id = %s'


async def _rpc_clients(kind: str, target: str, clients: int, seconds: float, tag: str) -> tuple[list[float], float]:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from offsetstore.v1 import offset_store_pb2 as pb
    from offsetstore.v1 import offset_store_pb2_grpc as pb_grpc

    latencies: list[float] = []
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.OffsetStoreServiceStub(channel)
        health = health_pb2_grpc.HealthStub(channel)
        partitions = 16 if kind.endswith("16") else 1

        def commit(group: str, n: int) -> pb.CommitOffsetsRequest:
            return pb.CommitOffsetsRequest(
                group_id=group,
                offsets=[pb.OffsetCommit(topic="bench", partition=p, offset=n) for p in range(partitions)],
            )

        groups = [f"bench-{tag}-{i}" for i in range(clients)]
        if kind in ("fetch16", "describe16"):
            for g in groups:
                await stub.CommitOffsets(commit(g, 1), timeout=30)
        cpu = time.process_time()
        stop_at = time.perf_counter() + seconds

        async def loop(group: str) -> None:
            n = 0
            while time.perf_counter() < stop_at:
                n += 1
                t = time.perf_counter()
                if kind == "echo":
                    await health.Check(health_pb2.HealthCheckRequest(), timeout=30)
                elif kind == "fetch16":
                    await stub.FetchOffsets(pb.FetchOffsetsRequest(group_id=group), timeout=30)
                elif kind == "describe16":
                    await stub.DescribeGroup(pb.DescribeGroupRequest(group_id=group), timeout=30)
                else:
                    await stub.CommitOffsets(commit(group, n), timeout=30)
                latencies.append(time.perf_counter() - t)

        await asyncio.gather(*(loop(g) for g in groups))
        cpu = time.process_time() - cpu
    return latencies, cpu


def _pg_clients(kind: str, url: str, clients: int, seconds: float, tag: str) -> tuple[list[float], float]:
    import threading

    import psycopg

    latencies: list[float] = []
    lock = threading.Lock()
    stop_at = time.perf_counter() + seconds

    def loop(i: int) -> None:
        group = f"pg-{tag}-{i}"
        mine = []
        with psycopg.connect(url, autocommit=True) as conn:
            if kind == "pg-fetch16":
                with conn.transaction():
                    for p in range(16):
                        conn.execute(PG_UPSERT, (group, "bench", p, 1))
            n = 0
            while time.perf_counter() < stop_at:
                n += 1
                t = time.perf_counter()
                if kind == "pg-upsert":
                    conn.execute(PG_UPSERT, (group, "bench", 0, n), prepare=True)
                else:
                    conn.execute(PG_FETCH, (group,), prepare=True).fetchall()
                mine.append(time.perf_counter() - t)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(clients)]
    cpu = time.process_time()  # the process's, all its threads'
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies, time.process_time() - cpu


def _worker(kind: str, target: str, clients: int, seconds: float, tag: str, out: multiprocessing.Queue) -> None:
    if kind in PG:
        out.put(_pg_clients(kind, target, clients, seconds, tag))
    else:
        out.put(asyncio.run(_rpc_clients(kind, target, clients, seconds, tag)))


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` and its descendants (live, or ended and waited for), from /proc."""
    ticks = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        parents[int(entry.name)] = int(fields[1])
        # Its own user + system time, and that of its children that ended (PostgreSQL's backends of
        # clients that have disconnected: the postmaster waited for them).
        cpu[int(entry.name)] = sum(int(f) for f in fields[11:15]) / ticks
    tree, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        children = [p for p, pp in parents.items() if pp == parent and p not in tree]
        tree.update(children)
        frontier.extend(children)
    return sum(cpu.get(p, 0.0) for p in tree)


def measure(
    kind: str,
    target: str,
    clients: int,
    seconds: float,
    processes: int,
    server_pid: int = 0,
    database_pid: int = 0,
) -> dict[str, float]:
    """Rate and latency percentiles of ``clients`` concurrent callers over ``processes`` processes.

    Also the clients' CPU per call (their processes', during the load). With ``server_pid``,
    the server's CPU per call (its process tree's, from /proc); with ``database_pid`` (a local
    PostgreSQL's postmaster), PostgreSQL's (its process tree's: every backend).
    """
    ctx = multiprocessing.get_context("spawn")
    out: multiprocessing.Queue = ctx.Queue()
    tag = uuid.uuid4().hex[:8]
    per = [clients // processes + (1 if i < clients % processes else 0) for i in range(processes)]
    workers = [
        ctx.Process(target=_worker, args=(kind, target, n, seconds, f"{tag}-{i}", out)) for i, n in enumerate(per) if n
    ]
    cpu_before = tree_cpu_seconds(server_pid) if server_pid else 0.0
    database_before = tree_cpu_seconds(database_pid) if database_pid else 0.0
    for w in workers:
        w.start()
    answers = [out.get() for _ in workers]
    cpu = tree_cpu_seconds(server_pid) - cpu_before if server_pid else 0.0
    database_cpu = tree_cpu_seconds(database_pid) - database_before if database_pid else 0.0
    for w in workers:
        w.join()
    latencies = sorted(x for found, _ in answers for x in found)
    calls = len(latencies) or 1
    return {
        "per_s": len(latencies) / seconds,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[max(0, int(len(latencies) * 0.99) - 1)] * 1000,
        # The workers' start-up (a second or so) is in the window too, the server idle then.
        "cpu_us": cpu / calls * 1e6 if server_pid else 0.0,
        "client_cpu_us": sum(spent for _, spent in answers) / calls * 1e6,
        "database_cpu_us": database_cpu / calls * 1e6 if database_pid else 0.0,
    }


def postmaster_pid(url: str) -> int:
    """The local postmaster serving ``url`` (a backend's parent), or 0 where it is not on this machine."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_backend_pid(), inet_server_addr() IS NULL OR inet_server_addr() = '127.0.0.1'")
        backend, local = row.fetchone() or (0, False)
    try:
        stat = Path(f"/proc/{backend}/stat").read_text()
    except OSError:
        return 0
    return int(stat.rpartition(")")[2].split()[1]) if local else 0


def fill(url: str, offsets: int, history: int) -> None:
    """Stores ``offsets`` offsets (16 per group) and ``history`` history rows, as set-based SQL."""
    import psycopg

    url = url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(url, autocommit=True) as conn:
        groups = offsets // 16
        conn.execute(
            "INSERT INTO offsetstore.groups (group_id, generation) "
            "SELECT 'big-' || g, 1 FROM generate_series(1, %s) g ON CONFLICT DO NOTHING",
            (groups,),
        )
        conn.execute(
            'INSERT INTO offsetstore.offsets (group_id, topic, partition, "offset") '
            "SELECT 'big-' || g, 'bench', p, 1000 FROM generate_series(1, %s) g, generate_series(0, 15) p "
            "ON CONFLICT DO NOTHING",
            (groups,),
        )
        step = 1_000_000
        for start in range(0, history, step):
            conn.execute(
                "INSERT INTO offsetstore.offset_history "
                "(group_id, topic, partition, previous_offset, new_offset, kind, generation, change_time) "
                "SELECT 'big-' || (i %% %s + 1), 'bench', i %% 16, i, i + 1, 1, 1, "
                "now() - interval '1 second' * (%s - i) / 100 "
                "FROM generate_series(%s, %s) i",
                (groups, history, start, min(start + step, history) - 1),
            )
        conn.execute("VACUUM ANALYZE offsetstore.offsets")
        conn.execute("VACUUM ANALYZE offsetstore.offset_history")
        conn.execute("VACUUM ANALYZE offsetstore.groups")


BUDGET_HEADER = (
    "| load | server | clients | PostgreSQL | all | cores ÷ all | rate ÷ that | all ÷ echo's | rate ÷ echo at most |\n"
    "|---|---|---|---|---|---|---|---|---|"
)


def _budget_row(name: str, r: dict[str, float], echo: dict[str, float] | None) -> str:
    """Where a call's CPU went: the server's, the clients', PostgreSQL's, and the rate they allow together.

    ``cores ÷ all`` is the rate the machine's cores could give if nothing else ran and no
    process waited; ``rate ÷ echo at most`` is echo's CPU per call over this load's: the
    ratio to echo this machine allows while clients, server and PostgreSQL share its cores.
    """
    spent = r["cpu_us"] + r["client_cpu_us"] + r["database_cpu_us"]
    if not spent:
        return f"| {name} | | | | | | | | |"
    ceiling = (os.cpu_count() or 1) / spent * 1e6
    cells = [
        f"{r['cpu_us']:,.0f} µs" if r["cpu_us"] else "",
        f"{r['client_cpu_us']:,.0f} µs",
        f"{r['database_cpu_us']:,.0f} µs" if r["database_cpu_us"] else "",
        f"{spent:,.0f} µs",
        f"{ceiling:,.0f}/s",
        f"{r['per_s'] / ceiling:.2f}",
    ]
    if echo:
        echo_spent = echo["cpu_us"] + echo["client_cpu_us"] + echo["database_cpu_us"]
        cells += [f"{spent / echo_spent:.2f}×", f"{echo_spent / spent:.2f}×"]
    else:
        cells += ["", ""]
    return f"| {name} | " + " | ".join(cells) + " |"


def load_average() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def _row(name: str, r: dict[str, float], echo: dict[str, float] | None) -> str:
    ratio = f"{r['per_s'] / echo['per_s']:.2f}×" if echo else ""
    cpu = f"{r['cpu_us']:,.0f} µs" if r.get("cpu_us") else ""
    cpu_ratio = f"{r['cpu_us'] / echo['cpu_us']:.2f}×" if echo and r.get("cpu_us") and echo.get("cpu_us") else ""
    p99_ratio = f"{r['p99_ms'] / echo['p99_ms']:.2f}×" if echo else ""
    return (
        f"| {name} | {r['per_s']:,.0f}/s | {r['p50_ms']:.1f} ms | {r['p99_ms']:.1f} ms | {ratio} | {p99_ratio} "
        f"| {cpu} | {cpu_ratio} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--client-processes", type=int, default=2)
    parser.add_argument("--big", action="store_true", help="also measure with 1M offsets and 10M history rows")
    parser.add_argument("--big-offsets", type=int, default=1_000_000)
    parser.add_argument("--big-history", type=int, default=10_000_000)
    parser.add_argument("--only", nargs="+", choices=RPCS + MORE_RPCS + PG, help="measure just these")
    parser.add_argument("--serve-arg", action="append", default=[], help="extra `offsetstore serve` argument")
    parser.add_argument(
        "--processes",
        type=int,
        nargs="+",
        default=[1, 2],
        help="serve with each of these --processes in turn (default 1 2), rates compared to the first",
    )
    parser.add_argument("--write-docs", action="store_true", help="rewrite the table in docs/performance.md")
    args = parser.parse_args()

    kinds = [k for k in RPCS + MORE_RPCS + PG if k in (args.only or RPCS + PG)]
    lines: list[str] = []

    def say(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    header = (
        "| load | rate | p50 | p99 | rate ÷ echo | p99 ÷ echo | server CPU per call | CPU ÷ echo |\n"
        "|---|---|---|---|---|---|---|---|"
    )
    results: dict[tuple[str, int, str], dict[str, float]] = {}
    for index, processes in enumerate(args.processes):
        serve_args = [*args.serve_arg, "--processes", str(processes)]
        with served(extra_args=serve_args) as server:
            pg_url = server.database_url.replace("postgresql+psycopg://", "postgresql://")

            database = postmaster_pid(pg_url)

            def run(
                label: str, kinds: list[str], server: Served = server, pg_url: str = pg_url, database: int = database
            ) -> None:
                for clients in args.concurrency:
                    say(f"\n{label}, {clients} concurrent clients, {args.seconds:g} s each; {load_average()}\n")
                    say(header)
                    echo = None
                    measured = []
                    for kind in kinds:
                        target = pg_url if kind in PG else server.address
                        pid = 0 if kind in PG else server.process.pid
                        r = measure(kind, target, clients, args.seconds, args.client_processes, pid, database)
                        results[(label, clients, kind)] = r
                        measured.append((kind, r))
                        if kind == "echo":
                            echo = r
                        say(_row(kind, r, echo if kind != "echo" else None))
                    say(f"\nwhere the machine's CPU went, per call ({os.cpu_count()} cores shared by all three):\n")
                    say(BUDGET_HEADER)
                    for kind, r in measured:
                        say(_budget_row(kind, r, echo if kind != "echo" else None))

            label = f"--processes {processes}, empty store"
            # PostgreSQL alone is measured once: it does not depend on the server.
            run(label, kinds if index == 0 else [k for k in kinds if k not in PG])
            if index > 0:
                first = f"--processes {args.processes[0]}, empty store"
                say(f"\n--processes {processes} ÷ --processes {args.processes[0]}, same run:")
                for clients in args.concurrency:
                    for kind in kinds:
                        if kind not in PG and (first, clients, kind) in results:
                            ratio = results[(label, clients, kind)]["per_s"] / results[(first, clients, kind)]["per_s"]
                            say(f"- {kind} at {clients}: {ratio:.2f}")
            if args.big and index == 0:
                started = time.perf_counter()
                fill(server.database_url, args.big_offsets, args.big_history)
                say(
                    f"\n(filled {args.big_offsets:,} offsets and {args.big_history:,} history rows"
                    f" in {time.perf_counter() - started:.0f} s)"
                )
                big = f"{args.big_offsets:,} offsets, {args.big_history:,} history rows"
                run(big, [k for k in kinds if k not in PG])
                say("\nbig ÷ empty, same run:")
                for clients in args.concurrency:
                    for kind in kinds:
                        if kind not in PG:
                            ratio = results[(big, clients, kind)]["per_s"] / results[(label, clients, kind)]["per_s"]
                            say(f"- {kind} at {clients}: {ratio:.2f}")

    if args.write_docs:
        machine = f"{os.cpu_count()} cores, {platform.python_implementation()} {platform.python_version()}"
        table = "\n".join(lines).strip()
        doc = Path(__file__).resolve().parent.parent / "docs" / "performance.md"
        text = doc.read_text()
        block = (
            "<!-- bench:start -->\n"
            f"Measured {time.strftime('%Y-%m-%d')} on {machine}, `make bench`"
            f" ({' '.join(['--seconds', str(args.seconds)] + (['--big'] if args.big else []))}).\n\n"
            f"{table}\n<!-- bench:end -->"
        )
        doc.write_text(re.sub(r"<!-- bench:start -->.*<!-- bench:end -->", lambda _: block, text, flags=re.S))
        print(f"\nwrote {doc}")


if __name__ == "__main__":
    main()
