"""The Kafka cluster the mirror writes to, and the groups it leaves out there (issue 58).

A group's offsets are positions in the logs of the cluster it is bound to
(:mod:`~offsetstore.storage.clusters`): the mirror writes a group only where it is bound to
the mirror's own cluster, or bound to none. The id is asked once, and again once forgotten
(after a failed write, or a lost mirror lock: the address may reach another cluster now).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

log = logging.getLogger("offsetstore.server.kafka_mirror")  # the mirror's lines, wherever they are written


class MirrorCluster:
    """The mirror's cluster id (None: not asked yet) and its count of the group writes it skipped for it."""

    def __init__(self, registry: CollectorRegistry, max_logged: int) -> None:
        self.id: str | None = None
        self.max_logged = max_logged
        # group -> the other cluster it was found bound to, when the skip was logged.
        self._logged: dict[str, str] = {}
        self.skipped = Counter(
            "offsetstore_kafka_mirror_skipped_groups",
            "Group writes the Kafka mirror skipped: the group is bound to another Kafka cluster than the one it "
            "writes to (its offsets mean nothing there).",
            registry=registry,
        )

    def ask(self, admin: AdminClient, seconds: float) -> None:
        """Reads the id from the brokers (raises where they do not answer)."""
        found = admin.describe_cluster(request_timeout=seconds)
        # A broker without a cluster id (before Kafka 0.10.1) is "": it takes only the groups bound to none.
        self.id = found.result(timeout=seconds + 5).cluster_id or ""
        log.info("kafka mirror writes to Kafka cluster %s: groups bound to another are skipped", self.id)

    def takes(self, group_id: str, bound: str | None) -> bool:
        """Whether a group bound to ``bound`` (None: to none) is written here; a skip is counted, logged once."""
        if bound is None or bound == self.id:
            return True
        self.skipped.inc()
        if self._logged.get(group_id) != bound:
            if len(self._logged) >= self.max_logged:
                self._logged.clear()
            self._logged[group_id] = bound
            log.info(
                "kafka mirror: the group is bound to Kafka cluster %s, not to %s where the mirror writes: not mirrored",
                bound,
                self.id,
                extra={"group_id": group_id},
            )
        return False
