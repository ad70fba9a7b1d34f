"""Draws the group status verdicts of tests/kafka/test_group_status_run.py over its run (docs/images/status-timeline.png).

Usage::

    OFFSETSTORE_STATUS_TIMELINE=/tmp/timeline.json pytest tests/kafka/test_group_status_run.py -k six
    python bench/status_timeline.py /tmp/timeline.json docs/images/status-timeline.png

(needs matplotlib, a dev dependency).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

COLOURS = {
    "OK": "#1d7a3a",
    "IDLE": "#9aa5b1",
    "LAGGING": "#e0a100",
    "STALLED": "#d9652b",
    "STOPPED": "#b3261e",
    "LOST": "#5c0f0a",
    "PAST_END": "#5c0f0a",
    "UNCONFIRMED": "#c9b98f",
    "UNSPECIFIED": "#ffffff",
}
ORDER = ("fast", "slow", "stalled", "killed", "idle", "lost")


def main(source: str, target: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    run = json.loads(Path(source).read_text())
    looks = run["looks"]
    end = max(t for t, _, _ in looks) + 0.3
    fig, ax = plt.subplots(figsize=(9, 3.2), dpi=110)
    seen = set()
    for row, name in enumerate(ORDER):
        mine = [(t, s) for t, n, s in looks if n == name]
        for (t, status), (t_next, _) in zip(mine, [*mine[1:], (end, "")], strict=False):
            ax.barh(row, t_next - t, left=t, color=COLOURS[status], height=0.6, linewidth=0)
            seen.add(status)
    ax.axvline(run["killed_at"], color="black", linewidth=1, linestyle="--")
    ax.text(run["killed_at"], -0.45, " SIGKILL (killed)", fontsize=8, va="bottom")
    ax.set_yticks(range(len(ORDER)), ORDER)
    ax.set_ylim(len(ORDER) - 0.5, -0.75)
    ax.set_xlim(0, end)
    ax.set_xlabel(
        f"seconds since the consumers committed (window {run['window']:g} s, reader every {run['interval']:g} s)"
    )
    ax.legend(
        handles=[Patch(color=COLOURS[s], label=s) for s in COLOURS if s in seen],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.28),
        ncol=7,
        fontsize=8,
        frameon=False,
    )
    ax.set_title("Group status verdicts, six consumer processes against Apache Kafka", fontsize=10)
    fig.tight_layout()
    fig.savefig(target)


if __name__ == "__main__":
    main(*sys.argv[1:3])
