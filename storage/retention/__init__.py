"""Retention: history partitions made ahead and dropped whole, idle groups expired, stale watermarks dropped.

The history (``offset_history``) is range-partitioned by ``change_time``, one partition
a UTC day, named ``offset_history_pYYYYMMDD``; ``offset_history_before_YYYYMMDD`` holds
everything before that day (the history of the store before partitioning) and
``offset_history_default`` catches rows of a day whose partition does not exist yet, so an
insert never fails because maintenance is behind. Retention drops whole partitions: no
DELETE, no vacuum.

A group is idle when neither its ``active_at`` (creation, join, reset) nor any of its
offsets' ``commit_time`` is newer than the retention. Expiry is decided under the group's
row lock, re-checked there, so a commit racing with it is either seen (and the group
kept) or runs after it and brings the group back with its offsets. An expired group keeps
its row as a tombstone with its generation, as a deleted one does.

:class:`~offsetstore.runtime.maintenance.Maintenance` (the runtime, beside the store it
runs through) runs the rounds in a thread of the server; with several servers on one
database an advisory lock lets one round run at a time.

One module a job: :mod:`.partitions` (the history's partitions, stale watermarks),
:mod:`.expiry` (idle groups).
"""

from __future__ import annotations

from offsetstore.storage.retention.expiry import ACTOR, EXPIRE_LIMIT, MAX_IDLE_FOR, expire_group, idle_groups
from offsetstore.storage.retention.partitions import (
    DAYS_AHEAD,
    HistoryPartition,
    drop_history_before,
    drop_stale_watermarks,
    history_horizon,
    history_partitions,
    make_history_partitions,
    oldest_history_time,
)

__all__ = [
    "ACTOR",
    "DAYS_AHEAD",
    "EXPIRE_LIMIT",
    "MAX_IDLE_FOR",
    "HistoryPartition",
    "drop_history_before",
    "drop_stale_watermarks",
    "expire_group",
    "history_horizon",
    "history_partitions",
    "idle_groups",
    "make_history_partitions",
    "oldest_history_time",
]
