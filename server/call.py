"""One offsetstore.v1 call as the gate hands it to each policy: its method's facts, its decoded request, its caller."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from offsetstore.core.calls import CallFacts

__all__ = ["Call"]


@dataclass(frozen=True, slots=True)
class Call:
    """Bound once by the gate, after the request is read and decoded; the policies (admission, quotas) take it whole.

    ``request`` is the decoded ``XxxRequest`` of ``facts.method``: a policy reads the fields
    its facts name (``cost_field``, ``entries_field``, ``preview_field``), never guesses a shape.
    """

    facts: CallFacts
    #: The decoded request message (its class is the method's input type).
    request: Any
    #: The authenticated principal's name; None without authentication.
    principal: str | None = None
    #: The partitions the request carries in its largest costly field, counted on the wire
    #: before it was decoded (:mod:`offsetstore.server.wire`): it costs no less.
    carried: int = 0

    @property
    def method(self) -> str:
        return self.facts.method
