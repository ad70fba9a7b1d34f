"""The ``offsetstore`` command: ``serve``, ``migrate``, the ``groups`` admin commands, ``token`` and ``completion``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib import metadata

from offsetstore.cli import groups as groups_cli
from offsetstore.cli._command_parser import CommandParser
from offsetstore.cli._completion import bash_script, group_names
from offsetstore.cli._migrate import add_migrate_parser
from offsetstore.cli._migrate import run as migrate_command
from offsetstore.cli._serve_flags import add_serve_flags


def _parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="offsetstore", description="A transactional offset store for stream consumers.")
    parser.add_argument("--version", action="version", version=f"offsetstore {_version()}")
    # Each command reports its own usage errors (an unknown option of 'token' is token's), in two lines.
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=CommandParser)

    serve = sub.add_parser(
        "serve",
        help="run the gRPC server and the metrics endpoint",
        description="Run the gRPC server. With no database configured it starts an embedded PostgreSQL "
        "under --data-dir. Every flag can also be set as the environment variable its help names.",
        usage="offsetstore serve [OPTIONS]",
    )
    add_serve_flags(serve)

    token = sub.add_parser(
        "token",
        help="make a bearer token and the line of the tokens file that admits it",
        description="Print a new random bearer token and its token_sha256 for the tokens file. With --hash, "
        "read an existing token from standard input and print only its token_sha256.",
    )
    token.add_argument("--hash", action="store_true", help="hash the token read from standard input")

    add_migrate_parser(sub)

    groups = sub.add_parser("groups", help="inspect and manage consumer groups (like kafka-consumer-groups)")
    groups_cli.configure_parser(groups)

    completion = sub.add_parser(
        "completion",
        help="print a shell completion script",
        description="Print a completion script of every command and option: source <(offsetstore completion bash) "
        "in ~/.bashrc, or save it in bash-completion's directory. Zsh runs it after "
        "autoload -U bashcompinit && bashcompinit.",
        usage="offsetstore completion [-h] {bash}",
    )
    # Optional to argparse, so that a missing shell is said in words (main), not as "required: shell, line".
    completion.add_argument("shell", nargs="?", choices=["bash"])
    completion.set_defaults(usage_error=completion.error)
    # What the script itself calls for a group's name: the groups starting with PREFIX on the server
    # the words typed so far name (their --server, TLS and token options), one a line.
    completion.add_argument("--groups", metavar="PREFIX", help=argparse.SUPPRESS)
    completion.add_argument("line", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    # The script's form: the words on stdin, each ended by a NUL, so that none is in argv (a --token).
    completion.add_argument("--line-on-stdin", action="store_true", help=argparse.SUPPRESS)
    return parser


def _missing_server_module() -> str | None:
    """The module of the server extra this install lacks (a client-only ``pip install offsetstore``), or None."""
    try:
        import offsetstore.runtime.migrate  # noqa: F401
        import offsetstore.server.serve  # noqa: F401
    except ModuleNotFoundError as error:
        if error.name is None or error.name.partition(".")[0] == "offsetstore":
            raise  # our own code is missing: a broken install, not a missing extra
        return error.name
    return None


def _token(args: argparse.Namespace) -> int:
    import secrets

    from offsetstore.server.auth import MIN_TOKEN_BITS, hash_token, token_bits

    if args.hash:
        token = sys.stdin.readline().strip()
        if not token:
            print("offsetstore: no token on standard input", file=sys.stderr)
            return 2
        if token_bits(token) < MIN_TOKEN_BITS:
            # Its SHA-256 would be guessed offline by whoever reads the tokens file.
            print(
                f"offsetstore: that token is too weak (at most {token_bits(token):.0f} bits, "
                f"{MIN_TOKEN_BITS} needed); run `offsetstore token` for a random one",
                file=sys.stderr,
            )
            return 2
        print(f'token_sha256 = "{hash_token(token)}"')
        return 0
    token = secrets.token_urlsafe(32)
    # The token goes to the client (OFFSETSTORE_TOKEN); only its hash goes to the server's file.
    print(f"token:          {token}")
    print(f'token_sha256 = "{hash_token(token)}"')
    return 0


def _version() -> str:
    """The installed distribution's version (what a bug report needs), as the build-info gauge reports it."""
    try:
        return metadata.version("offsetstore")
    except metadata.PackageNotFoundError:
        return "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "groups":
        return groups_cli.run(args)
    if args.command == "token":
        return _token(args)
    if args.command == "completion":
        if args.shell is None:
            args.usage_error("name the shell to complete for: offsetstore completion bash")
        if args.groups is not None:
            line = args.line[1:] if args.line[:1] == ["--"] else args.line
            if args.line_on_stdin:
                line = sys.stdin.read().split("\0")[:-1]
            print("".join(f"{name}\n" for name in group_names(line, args.groups)), end="")
            return 0
        print(bash_script(_parser()), end="")
        return 0
    missing = _missing_server_module()
    if missing is not None:
        # One line instead of a traceback: serve and migrate need the server extra. There is no PyPI
        # release to name (tests/packaging/test_docs.py): the checkout's form, as examples/spark/orders_job.py's hint.
        print(
            f"offsetstore: the server is not installed (no module {missing}): install the server extra "
            "(from the checkout: pip install '.[server]'; from a wheel: pip install '<wheel>[server]')",
            file=sys.stderr,
        )
        return 2
    if args.command == "migrate":
        return migrate_command(args)
    from offsetstore.server.config import Settings
    from offsetstore.server.serve import serve

    flags = {k: v for k, v in vars(args).items() if k != "command"}
    try:
        settings = Settings.load(flags)
    except ValueError as error:
        print(f"offsetstore: {error}", file=sys.stderr)
        return 2
    return serve(settings)


if __name__ == "__main__":
    sys.exit(main())
