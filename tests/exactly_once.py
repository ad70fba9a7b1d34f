"""The check every sink test ends with: each expected record is in the table exactly once, nothing else."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable


def assert_exactly_once(found: Iterable[tuple[str, int, int]], expected: set[tuple[str, int, int]]) -> None:
    """``found`` are the (topic, partition, offset) of the table's rows."""
    counts = Counter(found)
    twice = sorted(k for k, n in counts.items() if n > 1)
    assert not twice, f"{len(twice)} records written more than once, e.g. {twice[:5]}"
    missing = sorted(expected - counts.keys())
    assert not missing, f"{len(missing)} records lost, e.g. {missing[:5]}"
    extra = sorted(counts.keys() - expected)
    assert not extra, f"{len(extra)} unexpected records, e.g. {extra[:5]}"
