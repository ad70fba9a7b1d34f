"""The groups commands' exit codes, and what they say about an error of the server or the connection."""

from __future__ import annotations

import argparse

import grpc
from grpc_status import rpc_status

from offsetstore.cli._connect import SERVER_ENV, TOKEN_ENV
from offsetstore.core.errors import (
    DeadlineExceededError,
    GroupNotFoundError,
    InvalidArgumentError,
    OffsetMismatchError,
    OffsetStoreError,
    PermissionDeniedError,
    StaleGenerationError,
    StoreUnavailableError,
    UnauthenticatedError,
)

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2


class UsageError(Exception):
    """A command that cannot do what was asked; the message says what to give instead."""


def _server_answered(error: OffsetStoreError) -> bool:
    """Whether the server sent this error, rather than gRPC failing to reach it.

    The server attaches a google.rpc.Status to every error it sends; a connection failure
    has none. The client chains the gRPC error it converted as the cause.
    """
    cause = error.__cause__
    if not isinstance(cause, grpc.Call):
        return True
    try:
        return rpc_status.from_call(cause) is not None
    except ValueError:
        return True


def error_message(error: OffsetStoreError, args: argparse.Namespace, server: str) -> str:
    group = getattr(args, "group", None)
    if isinstance(error, GroupNotFoundError) and group is not None:
        return f"Error: group {group} does not exist."
    if isinstance(error, InvalidArgumentError):
        lines = [f"Error: {error.message}"]
        # A one-field error's message already is "field: description".
        violations = (f"{v.field}: {v.description}" for v in error.violations)
        lines += [f"  {v}" for v in violations if v not in error.message]
        return "\n".join(lines)
    if isinstance(error, StaleGenerationError):
        current = error.current_generation
        # The server's message names the current generation already ("... the current generation is 5").
        said = current is None or f"current generation is {current}" in error.message
        suffix = "" if said else f" (current generation {current})"
        message = f"Error: {error.message}{suffix}. Another writer or a reset changed the group meanwhile."
        if getattr(args, "expected_generation", None) is not None:
            message += " Nothing was reset: run the dry run again, check it, and pass the generation it shows."
        return message
    if isinstance(error, OffsetMismatchError):
        stored = error.stored_offset
        return f"Error: {error.message}" + (f" (stored offset {stored})" if stored is not None else "")
    if isinstance(error, UnauthenticatedError):
        return f"Error: {error.message}\nGive a token with {TOKEN_ENV}, --token-file or --token."
    if isinstance(error, PermissionDeniedError):
        return f"Error: {error.message}. Ask for a grant on the group's prefix in the server's tokens file."
    if isinstance(error, StoreUnavailableError):
        if not _server_answered(error):
            return (
                f"Error: cannot reach the offsetstore server at {server}: {error.message}\n"
                f"Is it running? Point to another one with --server or {SERVER_ENV}; "
                "a server that serves TLS needs --tls or --tls-ca (and --tls-cert/--tls-key for mutual TLS)."
            )
        return f"Error: the offsetstore server at {server} is unavailable: {error.message}"
    if isinstance(error, DeadlineExceededError):
        # The client's message says whether a write may have been applied, and how to find out.
        return f"Error: no answer from the offsetstore server at {server} in time (see --timeout): {error.message}"
    return f"Error: {error.message}"
