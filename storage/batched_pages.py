"""The page query of several groups in one statement: the form the runtime's coalesced reads send (runtime/_read_batch.py).

A page query of :mod:`.reads` or :mod:`.describe` takes one group's parameters (the group,
where its page starts, how many rows, its byte budget). :func:`batched` writes it once per
group of a batch, side by side: ``LEFT JOIN LATERAL`` over arrays of those parameters, one
row of them per caller, so the batch runs in one statement and one snapshot. It lives here,
beside the queries it rewrites, because it knows their parameters: a page query that gains
a parameter of its own fails here, at import, not in a runtime that copies its text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Sequence
from typing import Any

from offsetstore.storage.steps import int_array, text_array

__all__ = ["BATCH_PARAMS", "PER_GROUP", "batch_params", "batched", "per_group"]

# The page query's parameters, each a column of the batch's rows instead.
_COLUMNS = {
    "%(group)s::VARCHAR": "b.group_id",
    "%(after_topic)s::VARCHAR": "b.after_topic",
    "%(after_partition)s::INTEGER": "b.after_partition",
    "%(rows)s::INTEGER": "b.row_limit",
    "%(budget)s::BIGINT": "b.budget",
}
#: The page query's parameters that are each caller's own (a column of the batch, not a parameter).
PER_GROUP = frozenset(("group", "after_topic", "after_partition", "rows", "budget"))
_PLACEHOLDER = re.compile(r"%\((\w+)\)s")

#: The batch's parameters: (its name, the page parameter it collects, its array literal; joined at C speed, see :mod:`.steps`).
BATCH_PARAMS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("groups", "group", text_array),
    ("after_topics", "after_topic", text_array),
    ("after_partitions", "after_partition", int_array),
    ("row_limits", "rows", int_array),
    ("budgets", "budget", int_array),
)


def per_group(sql: str, fixed: Collection[str] = ()) -> str:
    """``sql`` with each of the caller's parameters a column of ``b``; those left must be among ``fixed``."""
    for placeholder, column in _COLUMNS.items():
        sql = sql.replace(placeholder, column)
    unmapped = set(_PLACEHOLDER.findall(sql)) - (set(fixed) - PER_GROUP)
    if unmapped:  # the page query gained a parameter of its own, or renders one otherwise
        raise AssertionError(f"unmapped parameters {sorted(unmapped)} in the page query: {sql}")
    return sql


def batched(page: str, alias: str, leading: str = "", fixed: Collection[str] = ()) -> str:
    """The page query ``page`` once per group of a batch, in one statement.

    A row: the caller's index (from 1), the ``leading`` columns, the page's row as ``alias``
    (NULLs where the group's page has none: LEFT JOIN). ``fixed``: the names of the page's
    parameters that are the same for every group, passed once.
    """
    assert not set(fixed) & {name for name, _, _ in BATCH_PARAMS}, "a fixed parameter shadows the batch's"
    return (
        f"SELECT b.n, {leading}{alias}.* "
        "FROM unnest(%(groups)s::VARCHAR[], %(after_topics)s::VARCHAR[], %(after_partitions)s::INTEGER[], "
        "%(row_limits)s::INTEGER[], %(budgets)s::BIGINT[]) "
        "WITH ORDINALITY AS b(group_id, after_topic, after_partition, row_limit, budget, n) "
        f"LEFT JOIN LATERAL ({per_group(page, fixed)}) AS {alias} ON true "
        f"ORDER BY b.n, {alias}.topic, {alias}.partition"
    )


def batch_params(reads: Sequence[dict[str, object]] | Sequence[Any]) -> dict[str, str]:
    """The batch's array parameters of the callers' page parameters ``reads``, in the callers' order."""
    return {name: literal([read[key] for read in reads]) for name, key, literal in BATCH_PARAMS}
