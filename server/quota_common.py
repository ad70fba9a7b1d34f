"""What the group and partition quotas share: a bounded memory of what passed, and which group ids they check."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict

from offsetstore.core.errors import InvalidArgumentError
from offsetstore.storage import validate as check

__all__ = ["KNOWN_GROUPS", "KNOWN_SECONDS", "KnownKeys", "checkable_group_id"]

#: How long a group seen live is taken as live without asking the database: a group expired
#: or deleted by another process or replica is checked again at most this long after.
KNOWN_SECONDS = 30.0

#: Group ids remembered as live. Ids are at most 255 bytes, so the set stays within tens of MB.
KNOWN_GROUPS = 65_536


class KnownKeys:
    """A bounded set of keys (group ids, say) seen, each for ``seconds``, least recently seen dropped first."""

    def __init__(self, size: int, seconds: float = KNOWN_SECONDS) -> None:
        self.size = size
        self.seconds = seconds
        self._ids: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()

    def __contains__(self, group_id: str) -> bool:
        with self._lock:
            seen = self._ids.get(group_id)
            if seen is None:
                return False
            if time.monotonic() - seen > self.seconds:
                del self._ids[group_id]  # ask the database again: it may have expired meanwhile
                return False
            return True

    def add(self, group_id: str) -> None:
        with self._lock:
            self._ids[group_id] = time.monotonic()
            self._ids.move_to_end(group_id)
            while len(self._ids) > self.size:
                self._ids.popitem(last=False)

    def discard(self, group_id: str) -> None:
        with self._lock:
            self._ids.pop(group_id, None)


def checkable_group_id(group: str) -> bool:
    """Whether ``group`` is a valid group id: the quotas check only those, the servicer refuses the others."""
    try:
        check.group_id(group)
    except InvalidArgumentError:
        return False
    return True
