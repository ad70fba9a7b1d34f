"""``python -m offsetstore.flink_integration [JOB.java ...]``: prints a classpath to run a Flink job with ``java -cp``."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from offsetstore.flink_integration.build import compile_java, flink_classpath, sink_classpath


def main(argv: list[str] | None = None) -> None:
    """Prints the sink's classes and Flink's jars (and ``JOB.java`` compiled against them, first) as one classpath."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("sources", nargs="*", type=Path, help="a job's Java sources, compiled against the rest")
    args = parser.parse_args(argv)
    parts = [str(sink_classpath()), *flink_classpath()]
    if args.sources:
        parts.insert(0, str(compile_java(args.sources, parts, name="flink-job")))
    print(os.pathsep.join(parts))


if __name__ == "__main__":
    main()
