"""``python -m offsetstore.flink_integration [JOB.java ...] | --pyflink``: a classpath for ``java -cp``, or PyFlink's jars."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from offsetstore.flink_integration.build import compile_java, flink_classpath, pyflink_jars, sink_classpath


def main(argv: list[str] | None = None) -> None:
    """Prints the sink's classes and Flink's jars (and ``JOB.java`` compiled against them, first) as one classpath.

    With ``--pyflink``, prints instead the jars a PyFlink job adds (``pipeline.jars``): ``;``-separated file URLs.
    """
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("sources", nargs="*", type=Path, help="a job's Java sources, compiled against the rest")
    parser.add_argument("--pyflink", action="store_true", help="the jars of a PyFlink job, as pipeline.jars takes them")
    args = parser.parse_args(argv)
    if args.pyflink:
        print(";".join(jar.as_uri() for jar in pyflink_jars()))
        return
    parts = [str(sink_classpath()), *flink_classpath()]
    if args.sources:
        parts.insert(0, str(compile_java(args.sources, parts, name="flink-job")))
    print(os.pathsep.join(parts))


if __name__ == "__main__":
    main()
