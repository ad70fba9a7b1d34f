"""What an aggregating read scans, as the cost it is admitted at: a one-row page of a huge group is not one row (issue 47).

DescribeGroup's first page (the group's verdict), ListTopics and ListGroups are admitted
by their page size, yet each reads every partition of the groups or topics it summarises:
a tenant with a big group under its own prefix bought, with ``page_size=1``, a 2 s scan
for the cost of one row (four at once took another tenant's commit p99 from 25 ms to
3.5 s). :meth:`ScanCost.of` counts what the read will scan, up to the admission's share,
and the gate admits the call at that cost: a tenant's scans of a huge group run one at a
time, each followed by its rest (:mod:`.admission`) while others are active.

A DescribeGroup first page of a large group whose verdict the maintenance keeps judges its page
only (issue 55): weighed as its page, without counting the group (that count was a
transaction of ~12 ms for 10,000 partitions, more than the page's read). Without a kept verdict
fresh enough it judges the whole group, and is weighed as such.
"""

from __future__ import annotations

from google.protobuf.message import Message

from offsetstore.core.calls import CallFacts, Scan
from offsetstore.runtime.async_store import AsyncStore
from offsetstore.server.call import Call
from offsetstore.server.policies.parts import Parts
from offsetstore.server.policy import Next
from offsetstore.storage import validate as check
from offsetstore.storage.scans import group_partitions, listed_partitions, verdict_partitions

__all__ = ["ScanCost", "make"]


class ScanCost:
    """Counts the partitions an aggregating read will scan (0 for any other call), up to ``cap``."""

    def __init__(self, store: AsyncStore, cap: int = check.MAX_PARTITIONS) -> None:
        self.store = store
        self.cap = cap

    async def of(self, call: Call) -> int:
        # The scan is a fact of the RPC (the .proto's `scan`), never told from its name.
        scan = call.scan
        if scan is Scan.GROUP:
            return await self.store.read(group_partitions, call.group, self.cap)
        if scan is Scan.VERDICT:
            window = self.store.status_rules.window
            return await self.store.read(verdict_partitions, call.group, call.page_size, window, self.cap)
        if scan is Scan.PREFIX:
            return await self.store.read(listed_partitions, *call.page(), self.cap)
        return 0

    @staticmethod
    def applies(facts: CallFacts) -> bool:
        """Whether a call of the method can scan at all: the gate leaves this policy out of the others' chains."""
        return facts.scan is not Scan.NOTHING

    async def __call__(self, call: Call, next: Next) -> Message:
        """The gate's policy: the call's scan counted, for the admission's cost share after it."""
        call.scanned = await self.of(call)
        return await next(call)


def make(parts: Parts) -> ScanCost:
    return ScanCost(parts.store)
