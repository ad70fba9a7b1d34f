"""Per-principal partition quota: a principal may store at most so many partitions (issue 22).

A group quota counts groups, and one group can hold a million partitions: enough to make
every scan of a tenant's groups, and monitoring, slow for everyone. A principal's partitions
are the stored offsets of the live groups its commit grants cover (as the group quota
counts groups). A CommitOffsets, or a ResetOffsets naming partitions, that would add
partitions beyond the quota is refused before it runs, with RESOURCE_EXHAUSTED, reason
``PARTITION_QUOTA``: ``max_partitions`` of its entry in the tokens file, else
``--max-partitions-per-principal``; 0 is no quota, and an admin on every group has none.

What it costs and what it does not promise:

- A call of a principal under a quota costs one statement: which of the call's partitions
  are new (primary-key lookups), and only when some are, how many partitions the principal
  stores (the live-group prefix index, then each group's primary-key range: tens of ms at a
  million). A call that repeats a partition set this server has passed before (a consumer's
  commits) costs a lookup in a bounded in-memory set instead.
- That set can be stale: partitions deleted since (by anyone) are added again without a
  check, once per remembered set; a reset to a commit time restores the partitions the group
  had, unchecked. Check and write are not one transaction, so concurrent calls may overshoot
  by what they add at once, which ``--max-calls-per-principal`` and the 10,000 partitions of
  a request bound.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence

from google.protobuf.message import Message

from offsetstore.core.calls import Scope
from offsetstore.core.errors import PartitionQuotaError, ResourceExhaustedError
from offsetstore.runtime.async_store import AsyncStore
from offsetstore.server.auth import AccessControl, Permission, Principal
from offsetstore.server.call import Call
from offsetstore.server.policies.parts import Parts
from offsetstore.server.policy import Next
from offsetstore.server.quota import creation_prefixes
from offsetstore.server.quota_common import KNOWN_GROUPS, KnownKeys, checkable_group_id
from offsetstore.storage.quotas import count_partitions, count_watermarks

__all__ = ["PartitionQuota", "make"]

#: The history budget's bursts: this many seconds of its rate.
HISTORY_BURST_SECONDS = 10.0


def topic_prefixes(principal: Principal) -> tuple[str, ...]:
    """The topic prefixes ``principal`` may report watermarks of, without those another one covers."""
    prefixes = sorted({g.prefix for g in principal.grants if g.topic and g.permission >= Permission.COMMIT})
    return tuple(p for p in prefixes if not any(p != q and p.startswith(q) for q in prefixes))


def _partitions(call: Call) -> list[tuple[str, int]]:
    """The partitions a call may add: the entries it writes (a commit's offsets), or those a reset names."""
    if call.facts.entries_field:
        return sorted({(o.topic, o.partition) for o in call.entries})
    if call.previews:
        return []
    return sorted({(s.topic, p) for s in call.selection for p in s.partitions})


class PartitionQuota:
    """Refuses the calls that would store partitions beyond the caller's quota; see the module docstring.

    The gate asks it (:meth:`check`) after auth named the caller and before the call runs,
    and tells it what a call did (:meth:`after`). Quotas are read from ``auth.config`` at each
    call, so a reloaded tokens file applies at once.
    """

    def __init__(
        self,
        store: AsyncStore,
        auth: AccessControl,
        max_partitions: int = 0,
        known: int = KNOWN_GROUPS,
        *,
        history_rows_per_second: float = 0,
    ) -> None:
        if max_partitions < 0:
            raise ValueError("the per-principal partition quota must be >= 0 (0: no quota)")
        if history_rows_per_second < 0:
            raise ValueError("the per-principal history budget must be >= 0 (0: none)")
        self.store = store
        self.auth = auth
        self.max_partitions = max_partitions
        self.known = KnownKeys(known)  # (group, partition set) keys that passed
        self.history_rate = history_rows_per_second
        # principal -> (rows left, when): only principals under a quota, so as many as the tokens file names.
        self._history: dict[str, tuple[float, float]] = {}

    def _history_left(self, principal: str, now: float) -> float:
        burst = self.history_rate * HISTORY_BURST_SECONDS
        left, when = self._history.get(principal, (burst, now))
        return min(burst, left + (now - when) * self.history_rate)

    def _check_history(self, principal: str) -> None:
        # History is kept for --history-retention whatever its rate: a principal whose commits
        # would append rows faster than its budget waits (issue 34 finding 10). A call may
        # overdraw the budget, as a response overdraws the byte budget: any single call passes.
        if self.history_rate <= 0 or principal not in self._history:
            return
        left = self._history_left(principal, time.monotonic())
        if left < 0:
            raise ResourceExhaustedError(
                f"{principal} has written more than {self.history_rate:g} history rows a second; retry later",
                retry_after=-left / self.history_rate,  # a hair of a deficit still travels as 1 ms (errors.py)
                metadata={"limit": "history_rows", "rows_per_second": f"{self.history_rate:g}"},
            )

    def _charge_history(self, call: Call, principal: str) -> None:
        # Calls that append to the history, one row a partition: the history budget counts them.
        facts = call.facts
        if self.history_rate <= 0 or not facts.appends_history or call.previews:
            return
        if facts.entries_field:  # a row an entry written (a commit's offsets)
            rows = len(call.entries)
        else:
            rows = sum(max(1, len(t.partitions)) for t in call.selection) or 1
        now = time.monotonic()
        self._history[principal] = (self._history_left(principal, now) - rows, now)

    def quota_of(self, name: str | None, *, topics: bool = False) -> tuple[int, tuple[str, ...]]:
        """(quota, group prefixes, or with ``topics`` topic prefixes) of the principal ``name``; a quota of 0 is none."""
        config = self.auth.config
        principal = None if config is None or name is None else config.principals.get(name)
        if principal is None or principal.may(Permission.ADMIN, ""):
            return 0, ()
        limit = self.max_partitions if principal.max_partitions is None else principal.max_partitions
        return limit, topic_prefixes(principal) if topics else creation_prefixes(principal)

    @staticmethod
    def _key(group: str, pairs: Sequence[tuple[str, int]]) -> str:
        digest = hashlib.blake2b(repr(pairs).encode(), digest_size=16).hexdigest()
        return f"{digest}:{group}"

    async def check(self, call: Call) -> None:
        """Raises PartitionQuotaError when ``call`` would store partitions beyond its principal's quota."""
        facts, principal = call.facts, call.principal
        if principal is None:
            return
        if facts.scope is Scope.TOPICS:
            await self._check_watermarks(call, principal)
            return
        if facts.appends_history and self.quota_of(principal)[0] != 0:
            self._check_history(principal)
        group = call.group
        if not facts.adds_partitions or not checkable_group_id(group):
            return
        limit, prefixes = self.quota_of(principal)
        if limit == 0:
            return  # before looking at the partitions: 10,000 of them are milliseconds of work
        pairs = _partitions(call)
        if not pairs or self._key(group, pairs) in self.known:
            return
        new, stored = await self.store.read(count_partitions, group, pairs, prefixes)
        if new and stored + new > limit:
            raise PartitionQuotaError(
                f"{principal} stores {stored} partitions, its quota is {limit}: this call would add {new} "
                "more. Delete offsets or groups it no longer uses (or let retention expire them), "
                "or ask the operator for a higher quota (max_partitions in the tokens file)",
                metadata={
                    "limit": "max_partitions",
                    "max_partitions": str(limit),
                    "partitions": str(stored),
                    "new_partitions": str(new),
                },
            )

    async def _check_watermarks(self, call: Call, principal: str) -> None:
        # Watermarks are per topic and have no owner: a principal's are those of the topics it
        # may report, and it may hold as many as the partitions it may store (issue 34 finding 10).
        limit, prefixes = self.quota_of(principal, topics=True)
        if limit == 0:
            return
        pairs = call.reported_partitions
        if not pairs or self._key("", pairs) in self.known:
            return
        new, stored = await self.store.read(count_watermarks, pairs, prefixes)
        if new and stored + new > limit:
            raise PartitionQuotaError(
                f"{principal}'s topics have watermarks of {stored} partitions, its quota is {limit}: this call "
                f"would add {new} more. Report the partitions consumers read, or ask the operator for a higher "
                "quota (max_partitions in the tokens file)",
                metadata={
                    "limit": "max_partitions",
                    "max_partitions": str(limit),
                    "partitions": str(stored),
                    "new_partitions": str(new),
                },
            )

    def after(self, call: Call) -> None:
        """Remembers a partition set that ``call``, which succeeded, stored."""
        facts, principal = call.facts, call.principal
        if principal is None:
            return
        if facts.appends_history and self.quota_of(principal)[0] != 0:
            self._charge_history(call, principal)
        if facts.scope is Scope.TOPICS and self.quota_of(principal)[0] != 0:
            pairs = call.reported_partitions
            if pairs:
                self.known.add(self._key("", pairs))
            return
        if facts.adds_partitions and self.quota_of(principal)[0] != 0:
            pairs = _partitions(call)
            if pairs:
                self.known.add(self._key(call.group, pairs))

    async def __call__(self, call: Call, next: Next) -> Message:
        """The gate's policy: :meth:`check` before the rest of the call, :meth:`after` once it succeeded."""
        await self.check(call)
        response = await next(call)
        self.after(call)
        return response


def make(parts: Parts) -> PartitionQuota | None:
    """The gate's partition quota (and history budget): with a tokens file only."""
    auth = parts.auth
    if auth is None or auth.config is None:
        return None
    limits = parts.limits
    return PartitionQuota(
        parts.store,
        auth,
        limits.max_partitions_per_principal,
        history_rows_per_second=limits.principal_history_rows_per_second,
    )
