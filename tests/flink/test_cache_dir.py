"""Where the Flink integration's caches go: ``OFFSETSTORE_CACHE_DIR`` moves the compiled classes and the jar lists.

The jars themselves are in Maven's local repository, which Maven's own ``MAVEN_OPTS=-Dmaven.repo.local``
moves (docs/flink.md, "Where the caches are"). No Flink runs here: a class compiled with the real
``javac``, and a jar list written by a stand-in ``mvn`` (what is tested is where the list goes, not Maven).
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
from pathlib import Path

import pytest

from offsetstore.flink_integration import compile_java
from offsetstore.kafka_integration.maven import CACHE_DIR_ENV, MissingPiece, cache_dir, maven_classpath

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "flink.md"

#: A stand-in for ``mvn ... dependency:build-classpath -Dmdep.outputFile=OUT``: writes one jar's path to OUT.
FAKE_MVN = """#!{python}
import sys
out = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("-Dmdep.outputFile="))
open(out, "w").write({jar!r})
"""


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``OFFSETSTORE_CACHE_DIR`` set to a new folder, and an XDG cache beside it that must stay empty."""
    chosen = tmp_path / "offsetstore-cache"
    monkeypatch.setenv(CACHE_DIR_ENV, str(chosen))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return chosen


def test_the_guide_names_the_variable() -> None:
    assert f"`{CACHE_DIR_ENV}` moves offsetstore's cache" in " ".join(GUIDE.read_text().split())
    assert "MAVEN_OPTS=-Dmaven.repo.local=" in GUIDE.read_text()


def test_without_it_the_cache_is_the_xdg_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CACHE_DIR_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir() == tmp_path / "offsetstore"


@pytest.mark.skipif(shutil.which("javac") is None and not os.environ.get("CI"), reason="no javac (a JDK) here")
def test_compiled_classes_go_to_the_chosen_folder(elsewhere: Path, tmp_path: Path) -> None:
    source = tmp_path / "Hello.java"
    source.write_text("public class Hello { public static void main(String[] a) { System.out.println(1); } }\n")
    out = compile_java([source], [], name="cache-test")
    assert out.parent == elsewhere
    assert (out / "Hello.class").is_file()
    assert not (tmp_path / "xdg").exists()


def test_the_jar_list_goes_to_the_chosen_folder_and_is_read_back_from_it(
    elsewhere: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jar = tmp_path / "m2" / "some.jar"
    jar.parent.mkdir()
    jar.write_bytes(b"PK")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    mvn = bin_dir / "mvn"
    mvn.write_text(FAKE_MVN.format(python=sys.executable, jar=str(jar)))
    mvn.chmod(mvn.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(bin_dir))

    assert maven_classpath(["org.example:some:1"], name="cache-test") == [str(jar)]
    # the list, and the lock that fetchers take turns on
    assert sorted(p.suffix for p in elsewhere.iterdir()) == [".classpath", ".lock"]
    assert not (tmp_path / "xdg").exists()

    # Read back from there: no Maven needed the second time.
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    assert maven_classpath(["org.example:some:1"], name="cache-test") == [str(jar)]
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "empty"))
    with pytest.raises(MissingPiece, match="needs Maven"):
        maven_classpath(["org.example:some:1"], name="cache-test")
