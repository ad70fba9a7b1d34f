"""The ``offsetstore groups`` commands: kafka-consumer-groups' experience over the gRPC client.

``offsetstore.cli.main`` mounts them with `configure_parser` and `run`; ``python -m
offsetstore.cli.groups list ...`` runs them on their own (the same commands without the
leading ``groups``). They talk to the server only through `OffsetStoreClient`.

Each command lives in a module of its own (``_list``: list, topics and expire, ``_describe``,
``_reset``, ``_delete``, ``_history``, ``_offsets_file``: export and import, ``_adopt``: adopt and
the export to Spark or a Kafka group); ``_parser``
builds the options from ``_values``' parsers (their longer help: ``_groups_help``; the parsers'
class, which says usage errors in two lines: ``_command_parser``), ``_render`` shows results, ``_errors`` words
the errors, ``_connect`` reaches the server.

Exit codes: 0 success, 1 an error (from the server, the connection or an input file),
2 a usage error (argparse's own code).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from offsetstore.cli import _connect, _errors, _offsets_file, _render, _values
from offsetstore.cli._adopt import cmd_adopt, cmd_export
from offsetstore.cli._command_parser import CommandParser
from offsetstore.cli._connect import (
    DEFAULT_SERVER,
    SERVER_ENV,
    SecurityOptionError,
    security_options,
    with_default_port,
)
from offsetstore.cli._delete import cmd_delete
from offsetstore.cli._describe import cmd_describe
from offsetstore.cli._errors import EXIT_ERROR, error_message
from offsetstore.cli._history import cmd_history
from offsetstore.cli._list import cmd_expire, cmd_list, cmd_topics
from offsetstore.cli._offsets_file import cmd_import
from offsetstore.cli._parser import configure_parser
from offsetstore.cli._profile import ProfileError, apply_profile
from offsetstore.cli._render import Output
from offsetstore.cli._reset import cmd_reset
from offsetstore.cli._switch import cmd_switch
from offsetstore.client import OffsetStoreClient
from offsetstore.core.errors import OffsetStoreError

__all__ = ["configure_parser", "main", "run"]

_COMMANDS: dict[str, Callable[[OffsetStoreClient, argparse.Namespace, Output], int]] = {
    "list": cmd_list,
    "topics": cmd_topics,
    "describe": cmd_describe,
    "reset": cmd_reset,
    "delete": cmd_delete,
    "history": cmd_history,
    "export": cmd_export,
    "adopt": cmd_adopt,
    "import": cmd_import,
    "expire": cmd_expire,
    "switch": cmd_switch,
}

# The helpers' names from before the commands had modules of their own, which tests use.
_error_message = _errors.error_message
_format_table = _render.format_table
_offset_cell = _render.offset_cell
_table_time = _render.table_time
_merge_topic_specs = _values.merge_topic_specs
_parse_datetime = _values.parse_datetime
_parse_duration = _values.parse_by_duration
_parse_topic_spec = _values.parse_topic_spec
_OffsetsFileError = _offsets_file.OffsetsFileError
_parse_offsets_csv = _offsets_file.parse_offsets_csv
_with_default_port = _connect.with_default_port


def run(args: argparse.Namespace) -> int:
    """Executes the parsed ``groups`` command; returns the process exit code."""
    try:
        apply_profile(args)
    except ProfileError as error:
        print(f"Error: {error}", file=sys.stderr)
        return EXIT_ERROR
    out = Output(args.output or "table", sys.stdout, sys.stderr)
    server = with_default_port(args.server or os.environ.get(SERVER_ENV) or DEFAULT_SERVER)
    options: dict[str, Any] = {} if args.timeout is None else {"timeout": args.timeout}
    try:
        options.update(security_options(args))
    except SecurityOptionError as error:
        out.error(f"Error: {error}")
        return EXIT_ERROR
    try:
        with OffsetStoreClient(server, **options) as client:
            return _COMMANDS[args.groups_command](client, args, out)
    except OffsetStoreError as error:
        out.error(error_message(error, args, server))
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (| head); say nothing, and keep Python from complaining at exit.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return EXIT_ERROR


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m offsetstore.cli.groups COMMAND ...``: the groups commands on their own."""
    parser = CommandParser(prog="python -m offsetstore.cli.groups")
    configure_parser(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
