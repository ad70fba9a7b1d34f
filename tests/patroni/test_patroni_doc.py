"""docs/patroni.md as a root shell on a plain Debian 12 runs it: its member files are made and pass ``patroni --validate-config``.

Issue 49: the doc's member YAML failed Patroni's own validation (``connect_address`` held
127.0.0.1), its commands needed ``sudo`` or systemd, and pg1 and pg2 were left to the reader.
Here the doc's template is parsed, the doc's own shell step makes the three member files from
it (in a temporary folder instead of ``/etc/patroni``), and each passes Patroni's validation
against a real etcd (skipped, with the reason, where Debian's ``patroni`` or ``etcd`` is absent).
"""

from __future__ import annotations

import ipaddress
import re
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.fixtures.fix_patroni import ETCD, PATRONI, Etcd, clean_env, distinct_ports
from tests.fixtures.processes import Processes, owned_temp_dir

DOC = Path(__file__).resolve().parents[2] / "docs" / "patroni.md"
TEMPLATE = "/etc/patroni/member.yml.in"


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), re.S)


def _members(folder: Path) -> list[Path]:
    """The doc's template in ``folder``, then its shell step that makes the member files, run there."""
    [template] = _blocks("yaml")
    (folder / "member.yml.in").write_text(template)
    [step] = [b for b in _blocks("sh") if TEMPLATE in b and "sed " in b]
    making = step.partition("\ninstall -d")[0].replace("/etc/patroni", str(folder))  # the rest acts on the system
    subprocess.run(["bash", "-euc", making], check=True, cwd=folder, timeout=30)
    return [folder / f"pg{i}.yml" for i in range(3)]


def _host(address: str) -> str:
    return address.rpartition(":")[0]


def test_the_doc_runs_as_root_without_sudo_or_systemd() -> None:
    shell = "\n".join(_blocks("sh"))
    assert "sudo" not in shell, "a minimal Debian has no sudo"
    assert "systemctl start" not in shell, "a container has no systemd"
    assert "runuser -u postgres -- patroni /etc/patroni/pg$i.yml" in shell
    assert "runuser -u etcd -- etcd" in shell, "/var/lib/etcd belongs to etcd"
    assert "install -d -o postgres -g postgres -m 0700 /var/lib/postgresql/patroni" in shell
    assert "service etcd stop" in shell, "Debian's own etcd holds 2379 and 2380"


def test_the_member_files_differ_where_they_must(tmp_path: Path) -> None:
    members = [yaml.safe_load(path.read_text()) for path in _members(tmp_path)]
    assert [m["name"] for m in members] == ["pg0", "pg1", "pg2"]
    for key in ("data_dir", "pgpass", "listen", "connect_address"):
        assert len({m["postgresql"][key] for m in members}) == 3, f"postgresql.{key} is the same in two members"
    for key in ("listen", "connect_address"):
        assert len({m["restapi"][key] for m in members}) == 3, f"restapi.{key} is the same in two members"
    for m in members:
        for address in (m["restapi"]["connect_address"], m["postgresql"]["connect_address"]):
            host = _host(address)
            assert not ipaddress.ip_address(host).is_loopback, f"{address}: Patroni refuses a loopback connect_address"
        assert m["postgresql"]["data_dir"].startswith("/var/lib/postgresql/patroni/")
        assert Path(m["postgresql"]["pgpass"]).parent == Path("/var/lib/postgresql/patroni")


def test_the_member_files_pass_patronis_validation(tmp_path: Path) -> None:
    if not (Path(PATRONI).exists() and Path(ETCD).exists()):
        pytest.skip(f"Debian's patroni and etcd-server are not installed ({PATRONI}, {ETCD}): apt-get install patroni")
    paths = _members(tmp_path)
    members = [yaml.safe_load(path.read_text()) for path in paths]
    for m in members:
        for address in (m["restapi"]["listen"], m["postgresql"]["listen"]):
            port = int(address.rpartition(":")[2])
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    pytest.skip(f"port {port}, the doc's, is in use here: Patroni's validation checks it is free")
    root = owned_temp_dir("offsetstore-patroni-doc-")
    etcd = Etcd(root, *distinct_ports(2))  # not the doc's 2379: Debian's own etcd may hold it
    pids = Processes()
    try:
        etcd.start(pids)
        for path in paths:
            path.write_text(path.read_text().replace("127.0.0.1:2379", etcd.host_port))
            done = subprocess.run(
                [PATRONI, "--validate-config", str(path)],
                capture_output=True,
                text=True,
                env=clean_env(root),
                timeout=60,
            )
            assert done.returncode == 0 and not done.stdout.strip(), f"{path.name}:\n{done.stdout}{done.stderr}"
    finally:
        pids.kill_all()
        if etcd.process is not None:
            etcd.process.wait(30)
        shutil.rmtree(root, ignore_errors=True)
