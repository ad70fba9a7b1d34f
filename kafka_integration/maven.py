"""Jars from Maven Central, fetched once: the runtime classpath of a few artifacts, for the JVM pieces the tests run.

Maven resolves them into its local repository (``~/.m2``, outside any checkout; Maven's own
``MAVEN_OPTS=-Dmaven.repo.local=DIR`` moves it); the resulting list of jars is remembered in a
file under :func:`cache_dir`, so a second call reaches no network and starts no Maven. Processes
that fetch the same jars at once (test workers) take turns on a lock, and a failed fetch (a
download cut short) is tried again before it is reported.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

__all__ = ["CACHE_DIR_ENV", "MissingPiece", "cache_dir", "maven_classpath"]

#: The environment variable that moves :func:`cache_dir`.
CACHE_DIR_ENV = "OFFSETSTORE_CACHE_DIR"


class MissingPiece(RuntimeError):
    """A piece cannot run here; the message, one line, names what to install or set."""


class _NotThere(MissingPiece):
    """Maven Central has no such artifact: not worth asking again."""


def cache_dir() -> Path:
    """offsetstore's cache (jar lists, compiled Java): ``$OFFSETSTORE_CACHE_DIR``, else ``$XDG_CACHE_HOME/offsetstore``,
    else ``~/.cache/offsetstore``. Read at each call, so a process that sets the variable first is followed."""
    if chosen := os.environ.get(CACHE_DIR_ENV):
        return Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "offsetstore"


def maven_classpath(artifacts: Sequence[str], *, name: str, attempts: int = 3) -> list[str]:
    """The runtime classpath of ``artifacts`` (``group:artifact:version``), fetched by Maven once.

    The list of jars is cached under ``name`` and Maven's options (``MAVEN_OPTS``: another
    local repository is another list); it is resolved again only when a jar it names is gone
    (``~/.m2`` wiped). Maven runs up to ``attempts`` times. Raises :class:`MissingPiece` with
    one line when Java or Maven is missing or Maven Central cannot be reached.
    """
    options = os.environ.get("MAVEN_OPTS", "").strip()
    key = hashlib.sha256("\n".join([*artifacts, options] if options else artifacts).encode()).hexdigest()[:12]
    listing = cache_dir() / f"{name}-{key}.classpath"
    if (jars := _listed(listing)) is not None:
        return jars
    if shutil.which("mvn") is None:
        raise MissingPiece(f"{name} needs Maven to fetch its jars once: apt-get install maven")
    listing.parent.mkdir(parents=True, exist_ok=True)
    # One fetch at a time: Maven's local repository is not made for writers racing on one artifact.
    with listing.with_suffix(".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (jars := _listed(listing)) is not None:  # fetched by whoever held the lock before
            return jars
        for attempt in range(1, attempts + 1):
            try:
                jars = _resolve(artifacts, name)
                break
            except _NotThere:
                raise
            except MissingPiece:
                if attempt == attempts:
                    raise
                time.sleep(5 * attempt)  # a mirror's hiccup, a connection reset: Maven resumes what it has
        partial = listing.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(os.pathsep.join(jars))
        partial.replace(listing)  # atomic: a killed fetch never leaves half a list
    return jars


def _listed(listing: Path) -> list[str] | None:
    """The jars a previous fetch listed, when every one is still there."""
    with contextlib.suppress(OSError):
        jars = listing.read_text().split(os.pathsep)
        if jars and all(os.path.isfile(j) for j in jars):
            return jars
    return None


def _resolve(artifacts: Sequence[str], name: str) -> list[str]:
    """One run of Maven: the runtime classpath of ``artifacts``."""
    with tempfile.TemporaryDirectory(prefix="offsetstore-mvn-") as work:
        deps = "".join(
            "<dependency><groupId>{}</groupId><artifactId>{}</artifactId><version>{}</version></dependency>".format(
                *a.split(":")
            )
            for a in artifacts
        )
        pom = Path(work, "pom.xml")
        pom.write_text(
            '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
            "<groupId>offsetstore.local</groupId><artifactId>classpath</artifactId><version>1</version>"
            f"<dependencies>{deps}</dependencies></project>"
        )
        out = Path(work, "classpath.txt")
        done = subprocess.run(
            ["mvn", "-q", "-B", "-f", str(pom), "dependency:build-classpath",
             "-Dmdep.includeScope=runtime", f"-Dmdep.outputFile={out}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        if done.returncode != 0 or not out.is_file():
            errors = [line for line in done.stdout.splitlines() if "ERROR" in line][:1]
            # An artifact Maven Central does not have stays missing however often it is asked.
            absent = any(s in done.stdout for s in ("Could not find artifact", "Failure to find", "was not found in"))
            why = "Maven Central does not have it" if absent else "is Maven Central reachable?"
            raise (_NotThere if absent else MissingPiece)(
                f"Maven could not fetch {name} ({', '.join(artifacts)}): {why} " + (errors[0].strip() if errors else "")
            )
        return out.read_text().strip().split(os.pathsep)
