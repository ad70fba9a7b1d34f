"""Does ``serve --processes N`` scale? Clients on some cores, the server on others (issue 33, item 5).

The server (its supervisor and serving processes) is started with the CPU affinity
``--server-cores``, the client processes run with ``--client-cores``, so the two do not take
each other's cores (PostgreSQL is not pinned: it is the machine's, or
``OFFSETSTORE_BENCH_DATABASE_URL``'s). For each ``--processes`` in turn, alternately for
``--rounds``, each load (``echo``, ``commit1`` by default) is measured: its rate, and the
server's CPU per call. From the CPU per call it prints what one server core gives
(10⁶ µs ÷ CPU per call) and how many server cores a target rate needs (rate × CPU per
call): what a larger machine with free cores would give, where this one cannot show it.
Timings are printed, never asserted.

Usage: ``python bench/scaling.py [--processes 1 2] [--server-cores 1] [--client-cores 0]
[--only echo commit1] [--seconds 5] [--rounds 2] [--concurrency 64] [--target 10000]``
"""

from __future__ import annotations

import argparse
import os

from _server import served
from rpc_throughput import RPCS, measure


def _cores(text: str) -> set[int]:
    return {int(c) for c in text.split(",")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--server-cores", type=_cores, default={1}, help="comma-separated CPU numbers")
    parser.add_argument("--client-cores", type=_cores, default={0}, help="comma-separated CPU numbers")
    parser.add_argument("--only", nargs="+", choices=RPCS, default=["echo", "commit1"])
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--client-processes", type=int, default=2)
    parser.add_argument("--target", type=float, default=10_000, help="a rate to size server cores for")
    args = parser.parse_args()

    mine = os.sched_getaffinity(0)
    print(
        f"server on cores {sorted(args.server_cores)}, clients on {sorted(args.client_cores)}"
        f" ({os.cpu_count()} cores here); PostgreSQL not pinned",
        flush=True,
    )
    results: dict[tuple[int, str], list[dict[str, float]]] = {}
    for n in range(1, args.rounds + 1):
        for processes in args.processes:
            os.sched_setaffinity(0, args.server_cores)  # the server's processes inherit it
            try:
                with served(extra_args=["--processes", str(processes)]) as server:
                    os.sched_setaffinity(0, args.client_cores)  # the client processes inherit this
                    for kind in args.only:
                        load = " ".join(open("/proc/loadavg").read().split()[:3])
                        r = measure(
                            kind,
                            server.address,
                            args.concurrency,
                            args.seconds,
                            args.client_processes,
                            server.process.pid,
                        )
                        results.setdefault((processes, kind), []).append(r)
                        print(
                            f"round {n} --processes {processes} {kind:8} {r['per_s']:7,.0f}/s"
                            f"  p99 {r['p99_ms']:6.1f} ms  server CPU {r['cpu_us']:6,.0f} µs/call  load {load}",
                            flush=True,
                        )
            finally:
                os.sched_setaffinity(0, mine)

    first = args.processes[0]
    print(f"\nsummary ({args.rounds} rounds each, {args.concurrency} clients, target {args.target:,.0f}/s):")
    for kind in args.only:
        for processes in args.processes:
            rs = results[(processes, kind)]
            rate = sum(r["per_s"] for r in rs) / len(rs)
            cpu = sum(r["cpu_us"] for r in rs) / len(rs)
            base = sum(r["per_s"] for r in results[(first, kind)]) / len(rs)
            print(
                f"- {kind} --processes {processes}: {rate:,.0f}/s ({rate / base:.2f}× --processes {first}),"
                f" server CPU {cpu:,.0f} µs/call → one server core ≈ {1e6 / cpu:,.0f}/s,"
                f" {args.target:,.0f}/s needs ≈ {args.target * cpu / 1e6:.1f} server cores"
            )


if __name__ == "__main__":
    main()
