"""Checks that Spark's Python workers can run the sink: the package imports there, at the driver's version."""

from __future__ import annotations

import json
import logging
import re
import sys
from importlib import metadata
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["WorkerEnvironmentError", "check_workers"]

log = logging.getLogger("offsetstore.spark_integration")

# Source of the function the workers run. It is compiled into a module that does not
# exist anywhere, so cloudpickle ships it by value: a worker that cannot import
# offsetstore still runs it, and reports why instead of failing to unpickle it.
_PROBE_SOURCE = """
def probe(_):
    import json, sys
    found = {"python": sys.executable, "python_version": sys.version.split()[0]}
    try:
        from importlib import metadata
        # What the executors' path imports in its tasks: the package, pyarrow, numpy.
        import offsetstore.spark_integration._staging
        found["offsetstore"] = metadata.version("offsetstore")
    except Exception as error:
        found["error"] = f"{type(error).__name__}: {error}"
    return json.dumps(found)
"""

_HOW = "set PYSPARK_PYTHON (spark.pyspark.python) to an interpreter that has it, or ship a packed environment (docs/spark.md, 'Running on a cluster')"

# The last "SomethingError: message" line of a Spark error: what went wrong in the worker.
_ERROR_LINE = re.compile(r"^\s*(?:[\w.]+\.)?(\w+(?:Error|Exception|MISMATCH\]?)[:\]].*)$", re.MULTILINE)


class WorkerEnvironmentError(RuntimeError):
    """Spark's Python workers cannot run the sink: offsetstore is missing there, or another version.

    The message is one line, saying what the workers run and how to fix it.
    """


def driver_version() -> str:
    """The offsetstore version of this process."""
    try:
        return metadata.version("offsetstore")
    except metadata.PackageNotFoundError:  # a source tree on sys.path, not installed
        return "unknown"


def _probe_function() -> Any:
    namespace: dict[str, Any] = {"__name__": "offsetstore_worker_probe"}
    exec(compile(_PROBE_SOURCE, "<offsetstore worker probe>", "exec"), namespace)
    return namespace["probe"]


def _tasks(spark: SparkSession) -> int:
    try:
        # Classic: one task per core, so that most executors get one.
        return max(1, min(spark.sparkContext.defaultParallelism, 64))
    except Exception:  # Spark Connect has no SparkContext
        return 2


def check_workers(spark: SparkSession) -> None:
    """Runs a tiny job whose tasks report their interpreter and offsetstore version; raises if one can't run the sink.

    Parameters
    ----------
    spark : pyspark.sql.SparkSession
        The session (classic or Spark Connect) whose executors will run the sink's tasks.

    Raises
    ------
    WorkerEnvironmentError
        A worker cannot import ``offsetstore.spark_integration`` and what its tasks
        need (pyarrow, numpy), runs another offsetstore version than this process, or
        cannot start at all (e.g. ``PYSPARK_PYTHON`` names a missing interpreter, or one
        of another Python minor version). The message is one line.

    Notes
    -----
    :class:`ExactlyOnceSink` calls it once per process, before the first batch it
    writes (unless ``check_workers=False`` or ``write_path="driver"``): without it, a worker without the package fails only when
    a batch first takes the executors' path, with ``No module named 'offsetstore'``
    deep in a task's traceback. The job is a plain (pickled, not Arrow) Python UDF over
    one row per task, so it needs nothing on the workers but Python; it costs about a
    second. It can only see the executors its tasks land on: on a cluster of mixed
    nodes, some may escape it.
    """
    from pyspark.sql.functions import udf

    probe = udf(_probe_function(), "string", useArrow=False)
    tasks = _tasks(spark)
    expected = driver_version()
    here = f"{sys.executable} (Python {sys.version.split()[0]}, offsetstore {expected})"
    try:
        rows = spark.range(0, tasks, 1, tasks).select(probe("id").alias("found")).collect()
    except Exception as error:
        reason = _worker_error(str(error))
        raise _fail(f"Spark's Python workers failed to run a Python task ({reason}); the driver runs {here}") from error
    for text in sorted({row["found"] for row in rows}):
        found = json.loads(text)
        worker = f"{found['python']} (Python {found['python_version']})"
        if "error" in found:
            raise _fail(
                f"Spark's Python workers cannot import offsetstore.spark_integration ({found['error']}) with {worker}; the driver runs {here}"
            )
        if found["offsetstore"] != expected:
            raise _fail(
                f"Spark's Python workers run offsetstore {found['offsetstore']} with {worker}; the driver runs {here}"
            )


def _fail(problem: str) -> WorkerEnvironmentError:
    message = f"{problem}: {_HOW}"
    # Also on stderr through logging's last resort when the job configured no logging: the
    # query's own error buries this line in a JVM traceback.
    log.error("%s", message)
    return WorkerEnvironmentError(message)


def _worker_error(text: str) -> str:
    """The line of a Spark error that says what failed in the worker, shortened."""
    lines = [m.group(1).strip() for m in _ERROR_LINE.finditer(text)]
    # Prefer Python's own errors (ModuleNotFoundError, PySparkRuntimeError...) over the JVM's wrappers.
    python = [line for line in lines if not line.startswith(("SparkException", "Py4JJavaError", "PythonException"))]
    line = (python or lines or [text.strip().splitlines()[0] if text.strip() else "no message"])[-1]
    return line if len(line) <= 300 else line[:297] + "..."
