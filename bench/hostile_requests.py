"""What issue 34's attacks on requests and HTTP connections cost a real ``offsetstore serve``: memory, CPU, stalls.

    OFFSETSTORE_BENCH_DATABASE_URL=postgresql://... python bench/hostile_requests.py [--baseline DIR]

Runs each attack against a server of this checkout and, with ``--baseline DIR`` (another
checkout, e.g. ``git archive <commit> | tar -x -C DIR``), against one of that code first, in
the same run, and prints both. The server runs with 1,024 descriptors, as a default systemd
unit does. Figures are of the server's process tree (supervisor and serving process):
resident memory growth at its peak, CPU seconds, and the longest a gRPC health check
waited while the attack ran (the event loop's stall). Not part of the pass/fail suite.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from offsetstore.client import OffsetStoreClient  # noqa: E402
from tests.fixtures.fix_tenants import Peak  # noqa: E402

MiB = 1 << 20
# Points the editable install's finder at another checkout, in the server and its spawned children.
_SITECUSTOMIZE = """
import os
import sys

root = os.environ.get("OFFSETSTORE_BENCH_CODE_ROOT")
for name, module in list(sys.modules.items()):
    if root and name.startswith("__editable___offsetstore") and isinstance(getattr(module, "MAPPING", None), dict):
        for package, path in list(module.MAPPING.items()):
            module.MAPPING[package] = path.replace(%r, root, 1)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, url: str, code_root: Path | None, workdir: Path) -> None:
        self.grpc, self.http = f"127.0.0.1:{free_port()}", free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("OFFSETSTORE_")}
        env["OFFSETSTORE_DATA_DIR"] = str(workdir / "data")
        if code_root is not None:
            site = workdir / "site"
            site.mkdir(exist_ok=True)
            (site / "sitecustomize.py").write_text(_SITECUSTOMIZE % str(ROOT))
            env["PYTHONPATH"] = str(site)
            env["OFFSETSTORE_BENCH_CODE_ROOT"] = str(code_root)
        self.log = workdir / f"serve-{self.http}.log"
        args = ["serve", "--database-url", url, "--listen", self.grpc, "--metrics-listen", ""]
        args += ["--http-listen", f"127.0.0.1:{self.http}"]
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "offsetstore.cli.main", *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024)),
            )
        with OffsetStoreClient(self.grpc, timeout=2) as client:
            stop_at = time.monotonic() + 90
            while True:
                try:
                    if client.health() == "SERVING":
                        break
                except Exception:
                    assert self.process.poll() is None and time.monotonic() < stop_at, self.log.read_text()
                time.sleep(0.2)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(60)


class Stall:
    """The longest gRPC health check while the ``with`` block runs: the server's event loop stall."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.longest = 0.0
        self._done = threading.Event()

    def __enter__(self) -> Stall:
        self._thread = threading.Thread(target=self._probe, daemon=True)
        self._thread.start()
        return self

    def _probe(self) -> None:
        with OffsetStoreClient(self.address, timeout=120) as client:
            while not self._done.is_set():
                started = time.perf_counter()
                client.health()
                self.longest = max(self.longest, time.perf_counter() - started)
                time.sleep(0.02)

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()


def raw_commit(server: Server, data: bytes) -> str:
    options = [("grpc.max_send_message_length", 64 * MiB)]
    with grpc.insecure_channel(server.grpc, options=options) as channel:
        try:
            channel.unary_unary("/offsetstore.v1.OffsetStoreService/CommitOffsets")(data, timeout=300)
        except grpc.RpcError as error:
            return error.code().name  # type: ignore[attr-defined]
    return "OK"


def post(server: Server, body: bytes, headers: dict[str, str] | None = None, path: str = "CommitOffsets") -> int:
    connection = http.client.HTTPConnection("127.0.0.1", server.http, timeout=300)
    try:
        all_headers = {"Content-Type": "application/json", **(headers or {})}
        connection.request("POST", f"/offsetstore.v1.OffsetStoreService/{path}", body, all_headers)
        response = connection.getresponse()
        response.read()
        return response.status
    except (BrokenPipeError, ConnectionResetError):
        return 0
    finally:
        connection.close()


def measured(server: Server, attack: object) -> str:
    with Peak(server.process.pid) as peak, Stall(server.grpc) as stall:
        answer = attack()  # type: ignore[operator]
    return f"{answer}: +{peak.growth / MiB:.0f} MiB, {peak.cpu:.1f} CPU s, gRPC stalled {stall.longest:.2f} s"


def descriptors(pid: int) -> int:
    from tests.fixtures.fix_tenants import process_tree

    return sum(len(os.listdir(f"/proc/{p}/fd")) for p in process_tree(pid))


def idle_connections(server: Server, count: int) -> str:
    held = []
    with Peak(server.process.pid) as peak:
        for _ in range(count):
            try:
                held.append(socket.create_connection(("127.0.0.1", server.http), timeout=5))
            except OSError:
                break
        time.sleep(1)  # let the server accept what it will
        fds = descriptors(server.process.pid)
        try:
            with OffsetStoreClient(server.grpc, timeout=5) as fresh:
                grpc_ok = fresh.health() == "SERVING"
        except Exception:
            grpc_ok = False
        open_after = sum(1 for s in held if _open(s))
    for s in held:
        s.close()
    return (
        f"{len(held)} opened: server fds {fds}, +{peak.growth / MiB:.0f} MiB, new gRPC connection "
        f"{'served' if grpc_ok else 'REFUSED'}, {open_after} still open after 1 s"
    )


def _open(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


def rebinding(server: Server) -> str:
    group = f"bench-rebind-{time.monotonic_ns()}"
    with OffsetStoreClient(server.grpc, timeout=20) as client:
        client.commit_offsets(group, {("orders", 0): 42})
        body = json.dumps({"groupId": group, "allTopics": True}).encode()
        status = post(server, body, {"Host": "attacker.example"}, "DeleteOffsets")
        left = len(client.fetch_offsets(group).offsets)
    return f"DeleteOffsets with Host: attacker.example -> {status}, offsets left {left}/1"


def malformed(server: Server, count: int = 50) -> str:
    before = server.log.read_text(errors="replace")
    for _ in range(count):
        with socket.create_connection(("127.0.0.1", server.http), timeout=5) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n")
            while s.recv(4096):
                pass
    time.sleep(0.5)
    new = server.log.read_text(errors="replace")[len(before) :]
    return f"{count} malformed requests: {new.count(chr(10))} log lines ({len(new)} bytes), {new.count('Traceback')} tracebacks"


def run(url: str, code_root: Path | None, label: str) -> None:
    with tempfile.TemporaryDirectory(prefix="offsetstore-hostile-") as workdir:
        server = Server(url, code_root, Path(workdir))
        try:
            print(f"--- {label}")
            group = b"bench-oversized"
            commit = b"\x0a" + bytes([len(group)]) + group + b"\x12\x00" * (20 * MiB)
            print("  2. 40 MB CommitOffsets of empty entries:", measured(server, lambda: raw_commit(server, commit)))
            body = b'{"groupId":"bench-json","offsets":[' + b",".join([b"{}"] * (10 * MiB // 3)) + b"]}"
            print("  3. 10 MB JSON body of {}:", measured(server, lambda: post(server, body)))
            print("  6. idle HTTP connections:", idle_connections(server, 1100))
            print("  8.", rebinding(server))
            print("  low.", malformed(server))
            zero = post(server, b'{"groupId":"g"}', {"Connect-Timeout-Ms": "0"}, "FetchOffsets")
            print(f"  low. Connect-Timeout-Ms: 0 -> {zero}")
        finally:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--baseline", type=Path, help="another checkout to measure first")
    args = parser.parse_args()
    url = os.environ["OFFSETSTORE_BENCH_DATABASE_URL"]
    if args.baseline is not None:
        run(url, args.baseline.resolve(), f"baseline ({args.baseline})")
    run(url, None, "this checkout")


if __name__ == "__main__":
    main()
