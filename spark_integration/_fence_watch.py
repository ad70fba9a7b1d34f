"""Stops an idle query whose run was fenced: a reset between batches is noticed without waiting for data."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine

from offsetstore import storage

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger("offsetstore.spark_integration")


def watch_idle(batch_df: DataFrame, engine: Engine, group_id: str, generation: int, run_id: str) -> None:
    """Registers the run's listener that stops the query if it is fenced while idle."""
    try:
        from pyspark.sql import SparkSession

        # Not the batch's session: a query runs on a clone of the session that started it,
        # and only the starting session's listeners hear of the query.
        streams = _starting_session(batch_df, SparkSession).streams
        streams.addListener(make_watch(engine, group_id, generation, run_id, streams))
    except Exception:  # a convenience: the next batch is fenced anyway
        log.warning("cannot watch the idle query for resets", exc_info=True, extra={"group_id": group_id})


def _starting_session(batch_df: DataFrame, session_class: Any) -> Any:
    """The session whose StreamingQueryManager runs the batch's query (the batch's own is a clone)."""
    query_id = batch_df.sparkSession.sparkContext.getLocalProperty("sql.streaming.queryId")
    for candidate in (session_class.getActiveSession(), session_class.builder.getOrCreate()):
        if candidate is not None and candidate.streams.get(query_id) is not None:
            return candidate
    raise RuntimeError("no session of this driver knows the query")


def make_watch(engine: Engine, group_id: str, generation: int, run_id: str, streams: Any) -> Any:
    """A ``StreamingQueryListener`` for one run of a query; PySpark is imported here, not at import time."""
    from pyspark.sql.streaming import StreamingQueryListener

    class FenceWatch(StreamingQueryListener):
        """On each idle event of its run, reads the group's generation; a newer one stops the query.

        Spark posts an idle event every ``spark.sql.streaming.noDataProgressEventInterval``
        (10 s by default) while a query finds no new data: the sink is not called then,
        so without this a reset would stop the query only when records arrive.
        """

        def __init__(self) -> None:
            super().__init__()
            self.done = False

        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            pass

        def onQueryIdle(self, event: Any) -> None:
            if self.done or str(event.runId) != run_id:
                return
            try:
                with engine.connect() as conn:
                    current = storage.group_generation(conn, group_id)
            except Exception:  # a watch, not the sink: the next batch checks again, under the lock
                log.debug("could not read the generation of an idle query's group", exc_info=True)
                return
            if current <= generation:
                return
            self.done = True
            log.warning(
                "group %s moved to generation %d (a reset, a delete or a newer run) while this run (%d) was idle: "
                "stopping the query",
                group_id,
                current,
                generation,
                extra={"group_id": group_id, "generation": generation, "current_generation": current},
            )
            query = streams.get(str(event.id))
            if query is not None:
                # Not on the listener bus's thread: stop() waits for the query to end.
                threading.Thread(target=query.stop, name="offsetstore-fence-watch", daemon=True).start()

        def onQueryTerminated(self, event: Any) -> None:
            if str(event.runId) != run_id:
                return
            self.done = True
            threading.Thread(target=streams.removeListener, args=(self,), daemon=True).start()

    return FenceWatch()
