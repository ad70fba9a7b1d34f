"""Which topics' watermarks the server-side Kafka reader may read for a group (issue 47, L1).

Reporting watermarks needs a topic grant, because a topic's watermarks are every group's and
steer their resets (docs/security.md). The reader reads them with the server's own Kafka
credentials, so before, a tenant refused ReportWatermarks on another tenant's topic committed
one partition of it into its own watched group and had the reader fetch and store them. The
reader now reads a group's partition only where a principal that may commit to the group may
also report the topic (a topic grant), as ReportWatermarks would allow it; or, when the
operator names them (``--watermarks-kafka-topics``), the topics of those prefixes. Without a
tokens file (no principals, no grants) every topic is read.

Only tenants' grants decide (issue 56, L1): a global admin (admin on every group) may commit
to every group and report every topic, so counting it allowed every topic for every group as
soon as one was in the tokens file. A group no tenant may commit to is written by global
admins only (or the database's own users), who chose its topics: its topics are read.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from offsetstore.server.auth import Permission, Principal

__all__ = ["TopicPolicy"]

#: Decisions remembered at most (a round asks about its groups' topics only).
_REMEMBERED = 65_536


class TopicPolicy:
    """Whether the reader may read ``topic``'s watermarks for ``group_id``: see the module docstring."""

    def __init__(
        self, *, topic_prefixes: Sequence[str] | None = None, principals: Iterable[Principal] | None = None
    ) -> None:
        self.topic_prefixes = tuple(topic_prefixes) if topic_prefixes else None
        # Tenants only: a global admin's grants cover every group and topic (see the module docstring).
        self.principals = (
            tuple(p for p in principals if not p.may(Permission.ADMIN, "")) if principals is not None else None
        )
        self._decided: dict[tuple[str, str], bool] = {}

    def allows(self, group_id: str, topic: str) -> bool:
        if self.topic_prefixes is not None:
            return topic.startswith(self.topic_prefixes)
        if self.principals is None:
            return True
        key = (group_id, topic)
        found = self._decided.get(key)
        if found is None:
            if len(self._decided) >= _REMEMBERED:
                self._decided.clear()
            committers = [p for p in self.principals if p.may(Permission.COMMIT, group_id)]
            found = self._decided[key] = not committers or any(p.may_report(topic) for p in committers)
        return found
