"""The plain (at-least-once) mode: commit through the gRPC client after the application processed a batch."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from offsetstore.client import OffsetStoreClient
from offsetstore.core.types import NO_OFFSET, CommittedOffset, OffsetCommit, TopicPartition
from offsetstore.kafka_integration._messages import default_member_id, kafka_cluster_id, refuse_errors
from offsetstore.kafka_integration.fingerprints import last_fingerprints

if TYPE_CHECKING:
    import confluent_kafka

    from offsetstore.kafka_integration.positions import StoredPositions

__all__ = ["AtLeastOnceCommitter", "next_offsets"]

log = logging.getLogger("offsetstore.kafka_integration")


def next_offsets(messages: Sequence[confluent_kafka.Message]) -> dict[TopicPartition, int]:
    """``max(offset) + 1`` of each partition among ``messages``; ValueError for a message with an error."""
    refuse_errors(messages)
    out: dict[TopicPartition, int] = {}
    for m in messages:
        tp = TopicPartition(m.topic(), m.partition())
        out[tp] = max(out.get(tp, 0), m.offset() + 1)
    return out


class AtLeastOnceCommitter:
    """Commits a processed batch's offsets to the store over gRPC, for sinks that are not the store's database.

    Parameters
    ----------
    client : OffsetStoreClient
        A client of the offsetstore service.
    group_id : str
        The offset store's consumer group.
    fenced : bool, default True
        Join the group (a new generation) before the first commit and commit with that
        generation, so a newer consumer of the group or an operator's reset stops this
        one with :class:`offsetstore.client.StaleGenerationError`. False commits
        unfenced (generation 0).
    compare_and_set : bool, default False
        Commit each partition only if its stored offset is still the one this consumer
        last saw (``expected_offset``); otherwise
        :class:`offsetstore.client.OffsetMismatchError` and nothing is committed.
        The offsets seen are those this committer committed, else those
        ``positions`` read on assignment.
    positions : StoredPositions, optional
        The rebalance helper of the same consumer; its reads seed compare-and-set.
    member_id : str, optional
        Recorded when joining the group. Default: ``"kafka:<host>:<pid>"``.
    consumer : confluent_kafka.Consumer, optional
        The consumer the messages come from. Its cluster id (from metadata) binds the group at
        :meth:`join`: a group bound to another cluster refuses the committer with
        :class:`offsetstore.client.ClusterMismatchError` (move it with ``offsetstore groups
        switch``); a group bound to none (an older one) is bound now. With it, each commit of
        messages also sends the fingerprint of the record before each committed offset (its
        timestamp and a digest of key, value and headers), stored in the commit's transaction:
        what ``groups switch`` finds on another cluster. Needs ``fenced``: the binding is
        checked at the join, and a switch fences the generations joined before it.

    Notes
    -----
    At least once: the application writes its sink first and calls :meth:`commit`
    after, so a crash between the two re-delivers the batch after the restart. Where
    the sink is the store's PostgreSQL database, :class:`ExactlyOnceWriter` closes
    that gap.

    A commit of next offsets (a mapping) carries no fingerprints: only messages have them.

    Examples
    --------
    >>> committer = AtLeastOnceCommitter(client, "mailer", consumer=consumer)
    >>> batch = consumer.consume(500, timeout=1.0)
    >>> send_emails(batch)
    >>> committer.commit(batch)
    """

    def __init__(
        self,
        client: OffsetStoreClient,
        group_id: str,
        *,
        fenced: bool = True,
        compare_and_set: bool = False,
        positions: StoredPositions | None = None,
        member_id: str | None = None,
        consumer: confluent_kafka.Consumer | None = None,
    ) -> None:
        if not isinstance(group_id, str) or not group_id:
            raise ValueError("group_id must be a non-empty string")
        if consumer is not None and not fenced:
            # Unfenced, a committer would go on committing (and fingerprinting) after a switch.
            raise ValueError("a consumer (the group's cluster binding) needs fenced=True")
        self.client = client
        self.group_id = group_id
        self.fenced = fenced
        self.compare_and_set = compare_and_set
        self.positions = positions
        self.member_id = member_id or default_member_id()
        self._generation: int | None = None
        self._committed: dict[TopicPartition, int] = {}
        self.consumer = consumer
        #: The Kafka cluster id of ``consumer``, read at the first :meth:`join`; None without one.
        self.cluster_id: str | None = None

    @property
    def generation(self) -> int | None:
        """The generation joined (0 when not fenced); None before the first commit or :meth:`join`."""
        return self._generation

    def join(self) -> int:
        """Joins the group (when ``fenced``): a new generation that fences older consumers.

        With a ``consumer``, the join binds the group to its Kafka cluster, or raises
        :class:`offsetstore.client.ClusterMismatchError` (joining nothing) for a group bound to another.
        """
        if not self.fenced:
            self._generation = 0
            return 0
        if self.consumer is not None and self.cluster_id is None:
            self.cluster_id = kafka_cluster_id(self.consumer)
        self._generation = self.client.join_group(self.group_id, self.member_id, kafka_cluster_id=self.cluster_id or "")
        return self._generation

    def commit(
        self, messages: Sequence[confluent_kafka.Message] | Mapping[tuple[str, int], int], *, metadata: str = ""
    ) -> dict[TopicPartition, CommittedOffset]:
        """Commits ``max(offset) + 1`` per partition of ``messages`` (or the given next offsets) in one call.

        Raises
        ------
        offsetstore.client.StaleGenerationError
            A newer consumer joined the group, or an operator reset it.
        offsetstore.client.OffsetMismatchError
            With ``compare_and_set``: a stored offset moved under this consumer.
        """
        fingerprints = None
        if isinstance(messages, Mapping):
            offsets = {TopicPartition(t, p): o for (t, p), o in messages.items()}
        else:
            offsets = next_offsets(messages)
            if self.consumer is not None:
                # A record without a timestamp (pre-0.10 formats) has no fingerprint a switch could find.
                found = last_fingerprints(messages, offsets)
                fingerprints = {tp: fp for tp, fp in found.items() if fp.timestamp_ms >= 0}
        if not offsets:
            return {}
        if self._generation is None:
            self.join()
        commits = [
            OffsetCommit(tp.topic, tp.partition, offset, metadata, self._expected(tp) if self.compare_and_set else None)
            for tp, offset in sorted(offsets.items())
        ]
        result = self.client.commit_offsets(
            self.group_id, commits, generation=self._generation or 0, fingerprints=fingerprints
        )
        self._committed.update({tp: c.offset for tp, c in result.items()})
        return result

    def _expected(self, tp: TopicPartition) -> int:
        if tp in self._committed:
            return self._committed[tp]
        seen = self.positions.stored.get(tp) if self.positions is not None else None
        return NO_OFFSET if seen is None else seen
