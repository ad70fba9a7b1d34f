"""The distribution ships every package folder of the repository, under its namespaced name."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_ROOTS = (
    "server",
    "client",
    "core",
    "storage",
    "runtime",
    "sink",
    "cli",
    "spark_integration",
    "kafka_integration",
    "migrations",
    "proto",
)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[zipfile.ZipFile, str]:
    """The wheel, and what its build printed (-v: the build backend's warnings too)."""
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-v",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        text=True,
        cwd=out,
    )
    (path,) = out.glob("offsetstore-*.whl")
    return zipfile.ZipFile(path), done.stdout + done.stderr


@pytest.fixture(scope="module")
def wheel(built: tuple[zipfile.ZipFile, str]) -> zipfile.ZipFile:
    return built[0]


def _package_dirs() -> list[Path]:
    return sorted(
        init.parent
        for top in PACKAGE_ROOTS
        for init in (ROOT / top).rglob("__init__.py")
        if "__pycache__" not in init.parts
    )


def _import_name(folder: Path) -> str:
    """The folder's name where the wheel installs it: under the src/ tree setuptools builds from."""
    (source,) = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"].values()
    for link in (ROOT / source / "offsetstore").iterdir():
        if folder.is_relative_to(link.resolve()):
            return ".".join(["offsetstore", link.name, *folder.relative_to(link.resolve()).parts])
    raise AssertionError(f"{folder.relative_to(ROOT)} has no link in {source}/offsetstore/")


def test_every_package_folder_is_in_the_wheel(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    folders = _package_dirs()
    assert folders, "found no package folders"
    for folder in folders:
        prefix = _import_name(folder).replace(".", "/")
        for source in folder.glob("*.py"):
            assert f"{prefix}/{source.name}" in names, f"{source.relative_to(ROOT)} is not packaged"


def test_data_files_are_in_the_wheel(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    for needed in (
        "offsetstore/v1/offset_store.proto",
        "offsetstore/v1/offset_store_pb2.pyi",
        "offsetstore/migrations/script.py.mako",
        "offsetstore/migrations/versions/0001_initial.py",
        "offsetstore/connect_integration/java/OffsetStoreBackingStore.java",
        *(
            f"offsetstore/flink_integration/java/offsetstore/flink/{f.name}"
            for f in (ROOT / "flink_integration" / "java" / "offsetstore" / "flink").glob("*.java")
        ),
        *(f"offsetstore/storage/sql/{f.name}" for f in (ROOT / "storage" / "sql").glob("*.sql")),
        *(f"offsetstore/server/http/console/{f.name}" for f in (ROOT / "server" / "http" / "console").iterdir()),
    ):
        assert needed in names


def test_the_build_warns_of_nothing(built: tuple[zipfile.ZipFile, str]) -> None:
    # A first install printed ~80 lines of setuptools warnings (issue 37): a folder of data files
    # that Python can import but the configuration did not list.
    warnings = [
        line.strip() for line in built[1].splitlines() if "Warning:" in line or "Package would be ignored" in line
    ]
    assert warnings == []


def test_the_editable_build_warns_of_nothing(tmp_path: Path) -> None:
    """Issue 49: every `make install` printed setuptools' 8-line "Editable installation" box.

    Its cause was the package-dir mapping (server -> offsetstore.server, ...): no plain layout, so
    setuptools installed an import hook and warned about it. src/offsetstore/ is that layout now,
    and the editable install is one .pth line.
    """
    # Any warning of setuptools' own (the box was one: InformationOnly) fails the build.
    build = (
        "import sys, warnings, setuptools.build_meta as b, setuptools.warnings as w; "
        "warnings.simplefilter('error', w.SetuptoolsWarning); b.build_editable(sys.argv[1])"
    )
    done = subprocess.run(
        [sys.executable, "-c", build, str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = tmp_path.glob("offsetstore-*.whl")
    with zipfile.ZipFile(wheel) as editable:
        (pth,) = [n for n in editable.namelist() if n.endswith(".pth")]
        assert editable.read(pth).decode().split() == [str(ROOT / "src")]


def test_nothing_installs_a_top_level_server_or_client(wheel: zipfile.ZipFile) -> None:
    tops = {name.split("/")[0] for name in wheel.namelist() if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"offsetstore"}
    assert "offsetstore/__init__.py" not in wheel.namelist(), "offsetstore must stay a namespace package"


def test_console_script(wheel: zipfile.ZipFile) -> None:
    (entry_points,) = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
    assert "offsetstore = offsetstore.cli.main:main" in wheel.read(entry_points).decode()


def test_the_license_travels_with_the_wheel(wheel: zipfile.ZipFile) -> None:
    (metadata,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    fields = wheel.read(metadata).decode().split("\n\n")[0].splitlines()
    assert "License-Expression: Apache-2.0" in fields
    assert "License-File: LICENSE" in fields
    (license_file,) = [n for n in wheel.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
    assert wheel.read(license_file).decode() == (ROOT / "LICENSE").read_text()
    assert "Apache License" in (ROOT / "LICENSE").read_text()
