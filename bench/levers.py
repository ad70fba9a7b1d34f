"""Each speed lever of issues 33 and 46 before and after, in one run, and where a serving process spends its time.

For each lever, two servers run side by side on one PostgreSQL: one with the lever undone
(bench/_levers_serve.py, ``OFFSETSTORE_BENCH_BEFORE``), one as shipped. Their measurements
alternate (``--rounds`` times: echo, then the lever's loads), so that a machine whose load
changes during the run weighs on both alike. A line per lever and load gives the rates, the
server's CPU per call (its process tree's, from /proc) and both as multiples of the echo
(grpc.health Check) of the same server in the same round, and PostgreSQL's CPU per call where
it runs on this machine (the servers take turns, so a window's is the measured server's). Then py-spy samples the shipped
server's serving process under each load and prints where its busy time goes: by source
file (inclusive) and by function (its own time). Timings are printed, never asserted; say
the load average printed with them when you quote them.

Usage: ``python bench/levers.py [--seconds 5] [--rounds 2] [--concurrency 64] [--no-profile]``
(``OFFSETSTORE_BENCH_DATABASE_URL`` selects a PostgreSQL; otherwise an embedded one).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil
from _server import free_port, served
from prometheus_client.parser import text_string_to_metric_families
from rpc_throughput import measure, postmaster_pid

HERE = Path(__file__).resolve().parent

#: lever -> the loads that show it.
LEVERS = {
    "pool-check": ("fetch16", "commit1"),
    "read-coalescing": ("fetch16",),
    # DescribeGroup alone, as before its pages rode batches (fetch16 beside it: the fetches' batches unchanged).
    "describe-coalescing": ("describe16", "fetch16"),
    # The pool check where every read takes a connection of its own (as before coalescing).
    "pool-check/reads-alone": ("fetch16",),
    # Issue 46: the serving processes on uvloop (the default) against asyncio's own loop (--event-loop asyncio).
    "uvloop": ("commit1", "fetch16", "commit16"),
    # Issue 46: the write batch on asyncpg ("before", bench/_levers_serve.py) against psycopg ("after").
    "asyncpg": ("commit1", "commit16"),
    # Issue 46: the write batch's transaction in three round trips of one send each, against the pipeline.
    "commit-round-trips": ("commit1", "commit16"),
    # Issue 46: the gate bounds request reads with one sweep, not a timer per call.
    "read-bound": ("commit1", "fetch16"),
    # Issue 46: a free flusher waits for more calls than the batch in the database holds.
    "gather": ("commit1", "fetch16", "commit16"),
    # Issue 55 (not shipped): the "before" server sends BEGIN, the settings and the batch's statement as one
    # simple query, two round trips instead of three; after ÷ before is the shipped three ÷ that.
    "merged-begin": ("commit1", "commit16"),
}
#: lever -> what both of its servers undo (the baseline it is measured on).
BASE = {"pool-check/reads-alone": "read-coalescing"}


def load_average() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


#: load -> the batches it rides (offsetstore_database_batch_calls{batch=...}).
BATCH_OF = {"commit1": "write", "commit16": "write", "fetch16": "read", "describe16": "read"}


def batch_counts(metrics: str, kind: str) -> tuple[float, float, float]:
    """The server's (batches, calls in them, batches of one call) of ``kind`` so far, from its /metrics."""
    with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    found = {"_count": 0.0, "_sum": 0.0, "_bucket": 0.0}
    for family in text_string_to_metric_families(text):
        if family.name != "offsetstore_database_batch_calls":
            continue
        for sample in family.samples:
            if sample.labels.get("batch") != kind:
                continue
            suffix = sample.name.removeprefix(family.name)
            if suffix in ("_count", "_sum") or (suffix == "_bucket" and float(sample.labels["le"]) == 1.0):
                found[suffix] += sample.value
    return found["_count"], found["_sum"], found["_bucket"]


def serving_pid(supervisor: int) -> int:
    """The busiest python child of ``supervisor`` (the serving process, with --processes 1)."""
    children = [c for c in psutil.Process(supervisor).children() if "python" in c.name().lower()]
    return max(children, key=lambda c: sum(c.cpu_times()[:2])).pid


def compare(lever: str, loads: tuple[str, ...], args: argparse.Namespace, say: callable) -> None:  # type: ignore[valid-type]
    served_args = ["--processes", str(args.processes)]
    program = (str(HERE / "_levers_serve.py"),)
    base = BASE.get(lever, "")
    undo = ",".join(filter(None, (lever.split("/")[0], base)))
    before_env = {**os.environ, "OFFSETSTORE_BENCH_BEFORE": undo}
    after_env = {**os.environ, "OFFSETSTORE_BENCH_BEFORE": base}
    # Each server's /metrics on a port of its own: the batch sizes each load rode.
    metrics = {name: f"127.0.0.1:{free_port()}" for name in ("before", "after")}
    with (
        served(
            extra_args=[*served_args, "--metrics-listen", metrics["before"]], program=program, env=before_env
        ) as before,
        served(
            extra_args=[*served_args, "--metrics-listen", metrics["after"]], program=program, env=after_env
        ) as after,
    ):
        # PostgreSQL's CPU per call too, where it runs here: the servers take turns, so a window's is the one measured.
        database = postmaster_pid(before.database_url.replace("postgresql+psycopg://", "postgresql://"))
        totals: dict[tuple[str, str], list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
        batches: dict[tuple[str, str], list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0.0])
        started = load_average()
        for _ in range(args.rounds):
            for name, server in (("before", before), ("after", after)):
                for kind in ("echo", *loads):
                    for clients in args.concurrency:
                        batch = BATCH_OF.get(kind)
                        so_far = batch_counts(metrics[name], batch) if batch else (0.0, 0.0, 0.0)
                        r = measure(
                            kind,
                            server.address,
                            clients,
                            args.seconds,
                            args.client_processes,
                            server.process.pid,
                            database,
                        )
                        calls = r["per_s"] * args.seconds
                        t = totals[(name, f"{kind}@{clients}")]
                        t[0] += calls
                        t[1] += args.seconds
                        t[2] += r["cpu_us"] * calls
                        t[3] += r["database_cpu_us"] * calls
                        if batch:
                            now = batch_counts(metrics[name], batch)
                            b = batches[(name, f"{kind}@{clients}")]
                            for i in range(3):
                                b[i] += now[i] - so_far[i]
        for kind in loads:
            for clients in args.concurrency:
                cells = []
                rates = {}
                for name in ("before", "after"):
                    calls, seconds, cpu, db_cpu = totals[(name, f"{kind}@{clients}")]
                    e_calls, e_seconds, e_cpu, _ = totals[(name, f"echo@{clients}")]
                    rate, e_rate = calls / seconds, e_calls / e_seconds
                    us, e_us, db_us = cpu / calls, e_cpu / e_calls, db_cpu / calls
                    rates[name] = (rate, us, db_us)
                    cell = f"{rate:,.0f}/s ({rate / e_rate:.2f}× echo), {us:,.0f} µs CPU ({us / e_us:.2f}× echo)"
                    if db_us:
                        cell += f", PostgreSQL {db_us:,.0f} µs"
                    count, carried, ones = batches[(name, f"{kind}@{clients}")]
                    if count:
                        cell += f", {carried / count:.1f} calls a batch ({ones / count:.0%} of one)"
                    cells.append(cell)
                gain = rates["after"][0] / rates["before"][0]
                cpu_gain = rates["after"][1] / rates["before"][1]
                db_gain = f", PostgreSQL's ×{rates['after'][2] / rates['before'][2]:.2f}" if rates["before"][2] else ""
                say(
                    f"- {lever}, {kind} at {clients} clients: before {cells[0]} → after {cells[1]};"
                    f" rate ×{gain:.2f}, CPU per call ×{cpu_gain:.2f}{db_gain} [{started} at its start]"
                )


def profile(args: argparse.Namespace, say: callable) -> None:  # type: ignore[valid-type]
    """py-spy on the shipped server's serving process under each load: busy time by file and by function."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        say("\n(no profile: py-spy is not installed; it is in the dev extra)")
        return
    with served(extra_args=["--processes", "1"]) as server:
        pid = serving_pid(server.process.pid)
        for kind in ("echo", "commit1", "fetch16"):
            out = Path(tempfile.mkdtemp(prefix="offsetstore-spy-")) / "raw.txt"
            spy_seconds = max(1, int(args.seconds) - 1)
            started = load_average()
            recorder = subprocess.Popen(
                [spy, "record", "--pid", str(pid), "--rate", "200", "--duration", str(spy_seconds),
                 "--format", "raw", "--nonblocking", "--output", str(out)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            time.sleep(0.5)  # py-spy attaches; the load's client processes take longer than that to start
            r = measure(kind, server.address, max(args.concurrency), args.seconds, args.client_processes)
            recorder.wait(60)
            say(f"\nprofile, {kind} at {max(args.concurrency)} clients ({r['per_s']:,.0f}/s; {started} at its start):")
            for line in summarize(out):
                say(line)
            shutil.rmtree(out.parent, ignore_errors=True)


def summarize(raw: Path, top: int = 12) -> list[str]:
    """py-spy's collapsed stacks as two short tables: inclusive share by file, own share by function."""
    if not raw.exists():
        return ["  (py-spy recorded nothing: is ptrace allowed here?)"]
    by_file: collections.Counter[str] = collections.Counter()
    by_function: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = [f for f in stack.split(";") if "(" in f]
        if not frames:
            continue
        for file in {_file(f) for f in frames} - _ROOTS:
            by_file[file] += n
        by_function[_function(frames[-1])] += n
    if not total:
        return ["  (no busy samples)"]
    lines = [f"  busy samples: {total:,}; inclusive share by file:"]
    lines += [f"    {n / total:6.1%}  {file}" for file, n in by_file.most_common(top)]
    lines.append("  own share by function (Handle._run: callbacks of the loop, grpc.aio's Cython among them):")
    lines += [f"    {n / total:6.1%}  {function}" for function, n in by_function.most_common(top)]
    return lines


#: Frames every busy sample passes through: no news in an inclusive table.
_ROOTS = {"threading.py", "asyncio/base_events.py", "asyncio/events.py", "asyncio/runners.py", "contextlib.py"}
_PROJECT = str(HERE.parent) + "/"


def _file(frame: str) -> str:
    """A frame's file: the project's as ``offsetstore/...``, a library's from its package, the stdlib's bare."""
    path = frame.rpartition("(")[2].rstrip(")").rpartition(":")[0]
    if path.startswith(_PROJECT):
        return "offsetstore/" + path[len(_PROJECT) :]
    for marker in ("site-packages/", "/lib/python3.11/", "/lib/python3.12/", "/lib/python3.13/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def _function(frame: str) -> str:
    name, _, where = frame.partition(" (")
    return f"{name} ({_file(frame)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64])
    parser.add_argument("--client-processes", type=int, default=2)
    parser.add_argument("--levers", nargs="+", choices=sorted(LEVERS), default=list(LEVERS))
    parser.add_argument("--processes", type=int, default=1, help="the servers' --processes (the profile uses 1)")
    parser.add_argument("--no-profile", action="store_true")
    args = parser.parse_args()

    def say(line: str) -> None:
        print(line, flush=True)

    embedded = None
    workdir = Path(tempfile.mkdtemp(prefix="offsetstore-levers-"))
    try:
        if not os.environ.get("OFFSETSTORE_BENCH_DATABASE_URL"):
            from offsetstore.runtime.embedded import EmbeddedPostgres

            embedded = EmbeddedPostgres(workdir / "pgdata")
            os.environ["OFFSETSTORE_BENCH_DATABASE_URL"] = embedded.start()
        say(
            f"{os.cpu_count()} cores; {args.rounds} alternating rounds of {args.seconds:g} s per load; {load_average()}"
        )
        for lever in args.levers:
            compare(lever, LEVERS[lever], args, say)
        if not args.no_profile:
            profile(args, say)
    finally:
        if embedded is not None:
            with contextlib.suppress(Exception):
                embedded.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
