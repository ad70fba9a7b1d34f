"""The compiled Java store's cache is trusted only when it is the user's own and no one else can write it (issue 47).

The capture's JVM runs whatever ``OffsetStoreBackingStore.class`` the cache holds, with the
store's database credentials: a class planted there by another local user must never run.
Decided before javac or a JVM is needed, so these run without a JDK.
"""

from __future__ import annotations

import hashlib
import os
from importlib import resources
from pathlib import Path

import pytest

from offsetstore.connect_integration.capture import store_classpath


def _planted(cache: Path) -> Path:
    source = resources.files("offsetstore.connect_integration").joinpath("java", "OffsetStoreBackingStore.java")
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    classes = cache / "offsetstore-connect" / digest / "offsetstore" / "connect"
    classes.mkdir(parents=True)
    (classes / "OffsetStoreBackingStore.class").write_bytes(b"\xca\xfe\xba\xbe planted")
    return cache / "offsetstore-connect" / digest


def test_a_cached_class_others_can_write_is_refused(tmp_path: Path) -> None:
    folder = _planted(tmp_path)
    (folder / "offsetstore").chmod(0o777)
    with pytest.raises(RuntimeError, match="is writable by others"):
        store_classpath(tmp_path)


@pytest.mark.skipif(os.geteuid() != 0, reason="planting files of another user needs root")
def test_a_cached_class_planted_by_another_user_is_refused(tmp_path: Path) -> None:
    folder = _planted(tmp_path)
    nobody = 65534
    os.chown(folder / "offsetstore" / "connect" / "OffsetStoreBackingStore.class", nobody, nobody)
    with pytest.raises(RuntimeError, match="belongs to uid 65534"):
        store_classpath(tmp_path)
