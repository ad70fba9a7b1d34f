"""Per-principal group quota: a principal may create at most so many groups (issue 14).

A principal's groups are the live groups (not deleted) whose id starts with a prefix it may
commit to, each counted once. A CommitOffsets or JoinGroup that would create a group (its id
is unknown, or deleted) is refused with RESOURCE_EXHAUSTED, reason ``GROUP_QUOTA``, once the
principal holds its quota: ``max_groups`` of its entry in the tokens file, else
``--max-groups-per-principal``; 0 is no quota. An admin on every group has none either.

What it costs and what it does not promise:

- Calls on groups this server has seen live cost a lookup in a bounded in-memory set, no
  database round trip. Any other call of a principal under a quota costs one statement
  (does the group live, and how many groups does the principal have; see :func:`offsetstore.storage.quotas.count_groups`).
- Every call that can make a group live is checked: CommitOffsets, JoinGroup and
  ResetOffsets (import resets, then commits), also where they revive a deleted or expired id.
- The set can be stale: a group deleted or expired by another process or replica (or by
  retention, which the supervising process runs) counts as live here for at most
  ``KNOWN_SECONDS``, so within that time its revival passes without a check (once per such
  group). A deletion or ExpireGroups through this process forgets its groups at once.
- Check and creation are not one transaction: a principal's concurrent creations may pass
  the same count and overshoot the quota by at most the calls it has running at once,
  which ``--max-calls-per-principal`` bounds. No lock is taken for a quota of groups.
"""

from __future__ import annotations

import logging

from google.protobuf.message import Message

from offsetstore.core.calls import Scope
from offsetstore.core.errors import GroupQuotaError
from offsetstore.runtime.async_store import AsyncStore
from offsetstore.server.auth import AccessControl, Permission, Principal
from offsetstore.server.call import Call
from offsetstore.server.policies.parts import Parts
from offsetstore.server.policy import Next
from offsetstore.server.quota_common import KNOWN_GROUPS, KnownKeys, checkable_group_id
from offsetstore.storage.quotas import count_groups
from offsetstore.v1 import offset_store_pb2 as pb

__all__ = ["GroupQuota", "creation_prefixes", "make"]

log = logging.getLogger(__name__)


def _creates(call: Call) -> bool:
    # A call that can make a group live (a new id, or one deleted or expired), unless it is a
    # preview (a reset that is not a dry run creates the group of an unknown id), or writes
    # entries and has none: a commit of no offsets only checks the generation.
    facts = call.facts
    if facts.entries_field and not call.entries:
        return False
    return facts.creates_group and not call.previews


def creation_prefixes(principal: Principal) -> tuple[str, ...]:
    """The group prefixes ``principal`` may commit to, without those another one covers: disjoint sets of groups."""
    prefixes = sorted({g.prefix for g in principal.grants if not g.topic and g.permission >= Permission.COMMIT})
    return tuple(p for p in prefixes if not any(p != q and p.startswith(q) for q in prefixes))


class GroupQuota:
    """Refuses the calls that would create a group beyond the caller's quota; see the module docstring.

    The server's gate asks it (:meth:`check`) after auth named the caller and before the
    call runs, and tells it what a call did (:meth:`after`). The caller's quota and grants
    are read from ``auth.config`` at each call, so a reloaded tokens file applies at once.
    With client certificates alone there are no quotas.
    """

    def __init__(
        self, store: AsyncStore, auth: AccessControl, max_groups: int = 0, known_groups: int = KNOWN_GROUPS
    ) -> None:
        if max_groups < 0:
            raise ValueError("the per-principal group quota must be >= 0 (0: no quota)")
        self.store = store
        self.auth = auth
        self.max_groups = max_groups
        self.known = KnownKeys(known_groups)

    def quota_of(self, name: str | None) -> tuple[int, tuple[str, ...]]:
        """(quota, prefixes) of the principal ``name``; a quota of 0 is none."""
        config = self.auth.config
        principal = None if config is None or name is None else config.principals.get(name)
        if principal is None or principal.may(Permission.ADMIN, ""):
            return 0, ()
        limit = self.max_groups if principal.max_groups is None else principal.max_groups
        return limit, creation_prefixes(principal)

    async def check(self, call: Call) -> None:
        """Raises GroupQuotaError when ``call`` would create a group beyond its principal's quota."""
        principal = call.principal
        if principal is None or not _creates(call):
            return
        group = call.group
        # A bad group id is the servicer's to refuse.
        if group in self.known or not checkable_group_id(group):
            return
        limit, prefixes = self.quota_of(principal)
        if limit == 0:
            return
        found, count = await self.store.read(count_groups, group, prefixes)
        if found:
            self.known.add(group)
        elif count >= limit:
            raise GroupQuotaError(
                f"{principal} already has {count} groups, its quota is {limit}: creating {group[:100]!r} "
                "would exceed it. Delete groups it no longer uses (or let retention expire them), "
                "or ask the operator for a higher quota (max_groups in the tokens file)",
                metadata={"limit": "max_groups", "max_groups": str(limit), "groups": str(count)},
            )

    def after(self, call: Call, response: Message) -> None:
        """Remembers what ``call``, which succeeded, did to the live groups."""
        facts = call.facts
        if _creates(call):
            self.known.add(call.group)  # created (or found)
        elif not facts.removes_groups or call.previews:
            return
        elif facts.scope is Scope.GROUP:
            if call.all_topics:  # the group is gone: its next commit creates it again
                self.known.discard(call.group)
        elif isinstance(response, pb.ExpireGroupsResponse):  # the groups a prefix removal removed
            for expired in response.groups:  # gone too: reviving one is a creation
                self.known.discard(expired.group_id)

    async def __call__(self, call: Call, next: Next) -> Message:
        """The gate's policy: :meth:`check` before the rest of the call, :meth:`after` once it succeeded."""
        await self.check(call)
        response = await next(call)
        self.after(call, response)
        return response


def make(parts: Parts) -> GroupQuota | None:
    """The gate's group quota: with a tokens file only (certificates alone name no quotas)."""
    auth = parts.auth
    if auth is None or auth.config is None:
        return None
    return GroupQuota(parts.store, auth, parts.limits.max_groups_per_principal)
