"""docs/adopt.md's offsetstore job, run as printed: only the broker, group, table, topic and checkpoint are the test's.

The guide's snippet starts a query and keeps no handle to it; this driver waits until the query
has read all the topic holds (``processAllAvailable``) and stops it, as an operator would stop a
job that caught up. ``spark`` and ``database_url`` are the names the guide leaves to the reader.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# The repository's root, as pytest sets it, for the tests' own Spark setup.
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tests.fixtures.doc_snippets import snippets  # noqa: E402
from tests.fixtures.fix_spark import build_spark  # noqa: E402

GUIDE = ROOT / "docs" / "adopt.md"


def guide_job(*, bootstrap: str, group: str, table: str, topic: str, partitions: int, checkpoint: str) -> str:
    """The guide's Spark job with the test's names; each replaced text must be there exactly once (or twice: the group)."""
    (code,) = [s for s in snippets(GUIDE, "python") if "ExactlyOnceSink" in s]
    swaps = {
        '"kafka:9092"': (repr(bootstrap), 1),
        '"moving-orders"': (repr(group), 2),
        '"public.orders"': (repr(table), 1),
        'partitions={"orders": 12}': (f"partitions={{{topic!r}: {partitions}}}", 1),
        '.option("subscribe", "orders")': (f".option('subscribe', {topic!r})", 1),
        '"/checkpoints/orders-offsetstore"': (repr(checkpoint), 1),
    }
    for old, (new, times) in swaps.items():
        assert code.count(old) == times, f"docs/adopt.md's Spark job no longer has {old} {times} time(s)"
        code = code.replace(old, new)
    return code


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    for name in ("--database-url", "--bootstrap", "--group-id", "--table", "--topic", "--checkpoint", "--workdir"):
        p.add_argument(name, required=True)
    p.add_argument("--partitions", type=int, required=True)
    args = p.parse_args()
    code = guide_job(
        bootstrap=args.bootstrap,
        group=args.group_id,
        table=args.table,
        topic=args.topic,
        partitions=args.partitions,
        checkpoint=args.checkpoint,
    )
    spark = build_spark("offsetstore-adopt-guide", Path(args.workdir), kafka=True)
    exec(compile(code, str(GUIDE), "exec"), {"spark": spark, "database_url": args.database_url})  # noqa: S102
    (query,) = spark.streams.active
    query.processAllAvailable()
    query.stop()
    print("finished", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
