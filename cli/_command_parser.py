"""The parsers' class: a usage error said in two lines by the command that got it (and ``import``'s operands read)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import NoReturn

from offsetstore.cli._errors import UsageError
from offsetstore.cli._offsets_file import import_operands

__all__ = ["CommandParser", "GroupsCommandParser"]


class CommandParser(argparse.ArgumentParser):
    """A command's parser: any usage error is reported by this command, in two lines.

    argparse hands a subcommand's unknown arguments back to the top-level parser, which
    would print its own usage, not the one of the command the user got wrong. And argparse
    prints a command's whole usage before its error: twelve lines for ``reset``, five for
    ``groups`` itself, above the one that says what is wrong. So every command of
    ``offsetstore`` says its errors in two lines: its usage and the error, argparse's own
    form, where the usage is one line; else the error first, and where the usage is.
    """

    def error(self, message: str) -> NoReturn:
        usage = self.format_usage()
        if usage.count("\n") == 1:
            self.exit(2, f"{usage}{self.prog}: error: {message}\n")
        self.exit(2, f"{self.prog}: error: {message}\nSee '{self.prog} --help' for its options.\n")

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras


class GroupsCommandParser(CommandParser):
    """A groups command's parser, which also reads ``import``'s operands."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        namespace, extras = super().parse_known_args(args, namespace)
        if getattr(namespace, "operands", None) is not None:
            try:
                namespace.group, namespace.file = import_operands(namespace)
            except UsageError as error:
                self.error(str(error))
        return namespace, extras
