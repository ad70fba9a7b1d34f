"""The storage core: every operation of the contract as one function over a caller's Connection.

Each function runs inside the caller's transaction and never commits, so the gRPC
server and the sinks share the very same code; a sink adds its rows to the same
transaction. Writes to a group first lock the group's row, which decides generation
checks, compare-and-set and resets under a lock instead of by read-then-write races.
Failures raise the typed errors of ``offsetstore.core.errors``; the caller rolls back,
so nothing is written.

One module per family of operations:

- :mod:`.writes`: commits and joins (the server-side ``offsetstore.write_batch``);
- :mod:`.reads`: offsets, groups, topics, history; :mod:`.describe`: a group's description
  with lag; :mod:`.pages` sizes and signs their pages; :mod:`.lag_columns` holds the lag and
  status columns they select;
- :mod:`.watermarks`: reported log starts and ends;
- :mod:`.resets`: an operator's resets and deletes;
- :mod:`.observe`: positions of pipelines that keep their own (observed groups);
- :mod:`.steps`: the hot statements as generators, driven sync here and async by
  :mod:`.async_store`; :mod:`.store` and :mod:`.async_store` run operations in transactions
  of their own for the server.
"""

from __future__ import annotations

from offsetstore.storage._groups import SelectionArg
from offsetstore.storage.describe import describe_group, describe_group_steps
from offsetstore.storage.lag_columns import (
    facts_of,
    group_verdict,
    lag_columns,
    lag_seconds_column,
    past_log_end_column,
    status_columns,
)
from offsetstore.storage.observe import check_observe, observe_offsets
from offsetstore.storage.pages import MAX_OFFSETS_PAGE, UNLIMITED, PageRequest, token_key
from offsetstore.storage.reads import (
    fetch_offsets,
    fetch_offsets_steps,
    list_groups,
    list_offset_history,
    list_topics,
)
from offsetstore.storage.resets import delete_offsets, reset_offsets
from offsetstore.storage.steps import PAUSE, HotSteps, Statement, drive_steps
from offsetstore.storage.watermarks import read_watermarks, report_watermarks, report_watermarks_steps
from offsetstore.storage.writes import (
    CommitRequest,
    JoinRequest,
    WriteOutcome,
    WriteRequest,
    check_write,
    commit_offsets,
    group_generation,
    join_group,
    lock_offsets,
    reset_count,
    write_batch,
    write_batch_steps,
)

__all__ = [
    "MAX_OFFSETS_PAGE",
    "PAUSE",
    "UNLIMITED",
    "CommitRequest",
    "HotSteps",
    "JoinRequest",
    "PageRequest",
    "SelectionArg",
    "Statement",
    "WriteOutcome",
    "WriteRequest",
    "check_write",
    "commit_offsets",
    "delete_offsets",
    "describe_group",
    "describe_group_steps",
    "fetch_offsets",
    "fetch_offsets_steps",
    "group_generation",
    "join_group",
    "lag_columns",
    "lag_seconds_column",
    "list_groups",
    "list_offset_history",
    "list_topics",
    "lock_offsets",
    "check_observe",
    "observe_offsets",
    "past_log_end_column",
    "status_columns",
    "facts_of",
    "group_verdict",
    "read_watermarks",
    "report_watermarks",
    "report_watermarks_steps",
    "reset_count",
    "reset_offsets",
    "drive_steps",
    "token_key",
    "write_batch",
    "write_batch_steps",
]
