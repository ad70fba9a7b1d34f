"""The gate's shape against the cheapest grpc.aio shapes, without a database (issue 33 item 3, issue 46 item 4).

The gate (server/gate.py) serves every method as a client-streaming handler of raw bytes,
so that it authenticates and admits from the metadata before it reads the request. Shapes,
each served by its own grpc.aio server process without a database (a canned FetchOffsets
response, the request decoded) and driven alternately by the same grpc.aio clients:

- ``stream``: the gate's shape, answering at once;
- ``interceptor+unary``: an interceptor that decides from the metadata, then a unary handler;
- ``stream+wait``: the gate's shape, but each call waits for its answer as a call on the
  database does: it queues a future that a flusher task resolves, for everything queued,
  after one round trip through a socket pair (a stand-in for the database's answer: one
  readiness event of the loop per batch, no database CPU);
- ``stream+loop``: the gate's shape, each call yielding to the loop once (``sleep(0)``)
  before it answers;
- ``stream-untimed``: the gate's shape without the timer that bounds the request's read;
- ``gate``: the real gate (server/gate.py) with every policy a server with tokens has
  (authentication, admission, the grants, the quotas, the scan cost, the deadline, the RPC
  metrics), over a servicer whose FetchOffsets answers the canned response at once. With
  ``--gate-trees before=/tmp/old/src after=src`` each tree's gate is a shape of its own
  (``gate[before]``, ``gate[after]``), imported from that source tree: the same run measures
  two versions of the gate side by side (``git archive`` a commit into /tmp for the old one).

The lines give each shape's rate and server CPU per call, and their ratio to the first
shape asked for. Timings are printed, never asserted.

Usage: ``python bench/gate_shape.py [--shapes stream stream+wait] [--seconds 5] [--rounds 3] [--concurrency 64]
[--gate-trees LABEL=SRC ...]``
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import sys
import time
from typing import Any

import psutil

SHAPES = ("stream", "interceptor+unary", "stream+wait", "stream+loop", "stream-untimed", "gate")
TOKEN = ("authorization", "Bearer bench")
SHAPE_METHOD = "/bench.Shape/Fetch"
GATE_METHOD = "/offsetstore.v1.OffsetStoreService/FetchOffsets"
GATE_TOKENS = """
[principals.bench]
token_sha256 = "{digest}"
grants = [{{ prefix = "bench-", permissions = ["commit"] }}]
"""


def _gate_server(loop: str, port: Any, ready: Any, tree: str | None) -> None:
    """The real gate of the source tree ``tree`` (None: the one imported), serving a canned FetchOffsets."""
    if tree is not None:
        sys.path.insert(0, tree)  # before anything of offsetstore is imported in this process
    import grpc
    from prometheus_client import CollectorRegistry

    from offsetstore.server import gate as gate_module
    from offsetstore.server import metrics
    from offsetstore.server.admission import Admission
    from offsetstore.server.auth import AccessControl, AuthConfig, hash_token
    from offsetstore.server.limits import Limits
    from offsetstore.server.partition_quota import PartitionQuota
    from offsetstore.server.quota import GroupQuota
    from offsetstore.server.scan_cost import ScanCost
    from offsetstore.server.servicer import OffsetStoreServicer
    from offsetstore.v1 import offset_store_pb2 as pb

    print(f"gate from {gate_module.__file__}", flush=True)
    response = pb.FetchOffsetsResponse(
        offsets=[pb.CommittedOffset(topic="bench", partition=p, offset=1) for p in range(16)], generation=1
    )

    class Canned(OffsetStoreServicer):
        async def FetchOffsets(self, request: Any, context: Any) -> Any:  # noqa: N802  # the RPC's name
            return response

    async def main() -> None:
        auth = AccessControl(AuthConfig.parse(GATE_TOKENS.format(digest=hash_token(TOKEN[1].split()[1]))))
        interceptors = metrics.interceptors(CollectorRegistry())
        # No byte budget: one principal at full speed would overdraw it (the same for every tree).
        admission = Admission(max_calls=1024, bytes_per_second=0)
        store: Any = None  # FetchOffsets touches no store in the policies (no scan, no quota lookup)
        if hasattr(gate_module, "ORDER"):  # the chain (issue 56)
            from offsetstore.server.interceptor import PolicyInterceptor

            gate = gate_module.Gate(
                Canned(store),
                store=store,
                admission=admission,
                limits=Limits(),
                auth=auth,
                observers=tuple(i for i in interceptors if isinstance(i, PolicyInterceptor)),
            )
        else:  # the gate before it: policies as keyword arguments, metrics also as an observer
            gate = gate_module.Gate(
                Canned(store),
                admission=admission,
                auth=auth,
                quota=GroupQuota(store, auth),
                partition_quota=PartitionQuota(store, auth),
                scan_cost=ScanCost(store),
                observers=tuple(i for i in interceptors if isinstance(i, gate_module.CallObserver)),
            )
        server = grpc.aio.server(interceptors=interceptors)
        server.add_generic_rpc_handlers((gate.handler(),))
        port.value = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        ready.set()
        await server.wait_for_termination()

    from offsetstore.runtime import event_loop

    event_loop.run(main(), loop)


def _server(shape: str, loop: str, port: Any, ready: Any) -> None:
    import grpc

    from offsetstore.v1 import offset_store_pb2 as pb

    response = pb.FetchOffsetsResponse(
        offsets=[pb.CommittedOffset(topic="bench", partition=p, offset=1) for p in range(16)], generation=1
    ).SerializeToString()
    counts: dict[str, int] = {}

    def decide(metadata: Any) -> bool:
        # What the gate decides from metadata: who calls (a token), and one more call of theirs.
        for key, value in metadata or ():
            if key == TOKEN[0] and value == TOKEN[1]:
                counts[value] = counts.get(value, 0) + 1
                return True
        return False

    queued: list[asyncio.Future[bytes]] = []
    wake = asyncio.Event()

    async def flusher() -> None:
        # As a write batcher's flusher: everything queued, one round trip, every caller answered.
        import socket

        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair()
        ours.setblocking(False)
        theirs.setblocking(False)
        while True:
            await wake.wait()
            wake.clear()
            batch = queued[:]
            queued.clear()
            await loop.sock_sendall(ours, b"q")
            await loop.sock_sendall(theirs, await loop.sock_recv(theirs, 1))
            await loop.sock_recv(ours, 1)
            for future in batch:
                if not future.done():
                    future.set_result(response)

    async def stream(requests: Any, context: Any) -> bytes:
        if not decide(context.invocation_metadata()):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "no token")
        if shape == "stream-untimed":
            data = await anext(requests)
        else:
            async with asyncio.timeout(30):
                data = await anext(requests)
        pb.FetchOffsetsRequest.FromString(data)
        if shape == "stream+loop":
            await asyncio.sleep(0)
        elif shape == "stream+wait":
            answer = asyncio.get_running_loop().create_future()
            queued.append(answer)
            wake.set()
            return await answer
        return response

    async def unary(data: bytes, context: Any) -> bytes:
        pb.FetchOffsetsRequest.FromString(data)
        return response

    class Decide(grpc.aio.ServerInterceptor):
        async def intercept_service(self, continuation: Any, details: Any) -> Any:
            if not decide(details.invocation_metadata):
                return None  # unimplemented: the cheapest refusal
            return await continuation(details)

    async def main() -> None:
        if shape.startswith("stream"):
            server = grpc.aio.server()
            handler = grpc.stream_unary_rpc_method_handler(stream)
        else:
            server = grpc.aio.server(interceptors=[Decide()])
            handler = grpc.unary_unary_rpc_method_handler(unary)
        flushing = asyncio.create_task(flusher())  # noqa: F841  # idle unless stream+wait queues
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("bench.Shape", {"Fetch": handler})])
        port.value = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        ready.set()
        await server.wait_for_termination()

    from offsetstore.runtime import event_loop

    event_loop.run(main(), loop)


def _clients(target: str, method: str, clients: int, seconds: float, out: Any) -> None:
    import grpc

    from offsetstore.v1 import offset_store_pb2 as pb

    async def run() -> int:
        request = pb.FetchOffsetsRequest(group_id="bench-group").SerializeToString()
        done = 0
        async with grpc.aio.insecure_channel(target) as channel:
            call = channel.unary_unary(method)
            stop_at = time.perf_counter() + seconds

            async def loop() -> None:
                nonlocal done
                while time.perf_counter() < stop_at:
                    await call(request, metadata=(TOKEN,), timeout=30)
                    done += 1

            await asyncio.gather(*(loop() for _ in range(clients)))
        return done

    out.put(asyncio.run(run()))


def measure(target: str, method: str, pid: int, clients: int, seconds: float, processes: int) -> tuple[float, float]:
    """(calls per second, server CPU µs per call)."""
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    per = [clients // processes + (1 if i < clients % processes else 0) for i in range(processes)]
    workers = [ctx.Process(target=_clients, args=(target, method, n, seconds, out)) for n in per if n]
    server = psutil.Process(pid)
    before = sum(server.cpu_times()[:2])
    for w in workers:
        w.start()
    calls = sum(out.get() for _ in workers)
    cpu = sum(server.cpu_times()[:2]) - before
    for w in workers:
        w.join()
    return calls / seconds, cpu / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--client-processes", type=int, default=2)
    parser.add_argument("--shapes", nargs="+", choices=SHAPES, default=["stream", "interceptor+unary"])
    parser.add_argument("--loop", choices=("asyncio", "uvloop"), default="uvloop", help="the servers' event loop")
    parser.add_argument(
        "--gate-trees",
        nargs="+",
        default=[],
        metavar="LABEL=SRC",
        help="the gate shape once per source tree (its src/ folder), as gate[LABEL]",
    )
    args = parser.parse_args()
    trees = dict(t.split("=", 1) for t in args.gate_trees)
    shapes = [s for s in args.shapes if s != "gate" or not trees]
    if trees:
        shapes += [f"gate[{label}]" for label in trees]

    ctx = multiprocessing.get_context("spawn")
    servers = {}
    for shape in shapes:
        port, ready = ctx.Value("i", 0), ctx.Event()
        if shape.startswith("gate"):
            tree = trees.get(shape[5:-1]) if "[" in shape else None
            tree = None if tree is None else os.path.abspath(tree)
            process = ctx.Process(target=_gate_server, args=(args.loop, port, ready, tree), daemon=True)
        else:
            process = ctx.Process(target=_server, args=(shape, args.loop, port, ready), daemon=True)
        process.start()
        if not ready.wait(60):
            raise SystemExit(f"the {shape} server did not start")
        servers[shape] = (f"127.0.0.1:{port.value}", process)
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the start", flush=True)
    totals = {shape: [0.0, 0.0] for shape in shapes}  # calls, CPU µs
    try:
        for _ in range(args.rounds):
            for shape in shapes:
                target, process = servers[shape]
                method = GATE_METHOD if shape.startswith("gate") else SHAPE_METHOD
                rate, us = measure(target, method, process.pid, args.concurrency, args.seconds, args.client_processes)
                totals[shape][0] += rate * args.seconds
                totals[shape][1] += us * rate * args.seconds
                print(f"  {shape}: {rate:,.0f}/s, {us:,.0f} µs server CPU per call", flush=True)
    finally:
        for _, process in servers.values():
            process.kill()
    seconds = args.rounds * args.seconds
    first_calls, first_cpu = totals[shapes[0]]
    print(f"gate shape, {args.concurrency} clients, {args.rounds} alternating rounds, {args.loop}:")
    for shape in shapes:
        calls, cpu = totals[shape]
        print(
            f"  {shape}: {calls / seconds:,.0f}/s {cpu / calls:,.0f} µs per call; against {shapes[0]}: "
            f"rate ×{calls / first_calls:.2f}, CPU per call ×{(cpu / calls) / (first_cpu / first_calls):.2f}"
        )


if __name__ == "__main__":
    main()
