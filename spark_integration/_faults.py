"""Fault-injection points of the Spark sink: where a test crashes, fails or watches a batch; no-ops otherwise.

The sink passes named points of each batch; nothing happens there unless a test
installed a hook with :func:`installed`. The product never installs one.

Points
------
On the driver, hooks are called with ``(stage, batch_id)``:

- ``"start"``: the batch arrived, nothing done yet.
- ``"staged"``: executors' path, every task's rows are in the staging table.
- ``"in_transaction"``: everything written, the transaction not yet committed.
- ``"committed"``: committed, not yet returned to Spark.

In each staging task, hooks are called with ``(stage, task, attempt)``:

- ``"task_copied"``: the task's rows were sent, its transaction is still open.
- ``"task_staged"``: the task's rows are committed.

Notes
-----
Task hooks travel with the job: the staging function Spark pickles carries the task
hooks installed when the batch was planned (:func:`shipped`), and each task arms
them in its own Python worker (:func:`arm`) before it runs. They must therefore be
picklable by cloudpickle into a process that imports them by name: a module-level
class of an importable module, such as
:class:`~offsetstore.spark_integration.testing.FailFirstAttempt` and
:class:`~offsetstore.spark_integration.testing.KillExecutorOnce`. This works the same
in local mode and where executors run in JVMs of their own (``local-cluster``, a real
cluster); an environment variable would not, since the executors' environment is
fixed when their JVMs start.

Examples
--------
>>> with installed(driver=lambda stage, batch_id: print(stage, batch_id),
...                task=FailFirstAttempt("task_staged", marker_dir)):
...     run_the_query(sink)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["DriverHook", "TaskHook", "arm", "at", "at_task", "installed", "shipped"]

DriverHook = Callable[[str, int], None]
TaskHook = Callable[[str, int, int], None]

_driver: tuple[DriverHook, ...] = ()
_task: tuple[TaskHook, ...] = ()


@contextmanager
def installed(*, driver: DriverHook | None = None, task: TaskHook | None = None) -> Iterator[None]:
    """Installs hooks for the duration of the block: ``driver`` on this process's sinks, ``task`` in their tasks."""
    global _driver, _task
    saved = (_driver, _task)
    if driver is not None:
        _driver = (*_driver, driver)
    if task is not None:
        _task = (*_task, task)
    try:
        yield
    finally:
        _driver, _task = saved


def at(stage: str, batch_id: int) -> None:
    """A driver point: runs the installed driver hooks."""
    for hook in _driver:
        hook(stage, batch_id)


def shipped() -> tuple[TaskHook, ...]:
    """The task hooks to ship with a staging job (empty unless a test installed some)."""
    return _task


def arm(hooks: tuple[TaskHook, ...]) -> None:
    """Makes ``hooks`` this worker's task hooks: a reused worker keeps none of an earlier job's."""
    global _task
    _task = hooks


def at_task(stage: str, task: int, attempt: int) -> None:
    """A staging task's point: runs the task hooks its job shipped."""
    for hook in _task:
        hook(stage, task, attempt)
