"""The ``offsetstore`` command: ``serve``, ``migrate``, the ``groups`` admin commands, ``token`` and ``completion``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

from offsetstore.cli import groups as groups_cli
from offsetstore.cli._completion import bash_script, group_names


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="offsetstore", description="A transactional offset store for stream consumers."
    )
    parser.add_argument("--version", action="version", version=f"offsetstore {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser(
        "serve",
        help="run the gRPC server and the metrics endpoint",
        description="Run the gRPC server. With no database configured it starts an embedded PostgreSQL "
        "under --data-dir. Every flag can also be set as OFFSETSTORE_<FLAG> (e.g. OFFSETSTORE_DATABASE_URL).",
    )
    serve.add_argument(
        "--database-url", help="external PostgreSQL URL (env OFFSETSTORE_DATABASE_URL); unset = embedded"
    )
    serve.add_argument(
        "--data-dir", type=Path, help="data directory of the embedded PostgreSQL (env OFFSETSTORE_DATA_DIR)"
    )
    serve.add_argument("--listen", metavar="HOST:PORT", help="gRPC address (default 127.0.0.1:50051)")
    serve.add_argument("--metrics-listen", metavar="HOST:PORT", help="Prometheus address (default 127.0.0.1:9464)")
    serve.add_argument(
        "--http-listen", metavar="HOST:PORT", help="HTTP/JSON API and web console address (default: off)"
    )
    serve.add_argument(
        "--http-allowed-hosts",
        metavar="NAME,..",
        help="Host names the HTTP API answers besides IP addresses, localhost and the listen host; "
        ".example.com allows every name under it (env OFFSETSTORE_HTTP_ALLOWED_HOSTS)",
    )
    serve.add_argument(
        "--no-migrate", dest="migrate", action="store_const", const=False, help="do not apply migrations at start"
    )
    serve.add_argument(
        "--sql-api-roles",
        choices=("keep", "revoke"),
        help="migrating across 0011: keep each SQL API v1 role's access on every group, or revoke it (default: stop and name them)",
    )
    serve.add_argument(
        "--migration-lock-timeout",
        metavar="DURATION",
        help="how long to wait for the migration lock before naming its holder and giving up (default 5m)",
    )
    serve.add_argument(
        "--processes",
        metavar="N|auto",
        help="serving processes sharing the port, each admitting 1/N of the per-principal limits; auto = one per CPU "
        "(default 1, env OFFSETSTORE_PROCESSES)",
    )
    serve.add_argument(
        "--max-workers",
        type=int,
        help="scale of the per-caller limits: streams max-workers/2, calls per principal /4, per anonymous peer x8 "
        "(default 32)",
    )
    serve.add_argument("--pool-size", type=int, help="database connections (default 16)")
    serve.add_argument(
        "--write-flushers", type=int, help="threads writing batches of concurrent commits (group commit; default 2)"
    )
    serve.add_argument("--statement-timeout-ms", type=int, help="bound of one SQL statement (default 5000)")
    serve.add_argument(
        "--database-prepare",
        choices=("on", "off"),
        help="prepared statements on the hot path; off behind a transaction pooler such as PgBouncer's "
        "pool_mode=transaction (default on)",
    )
    serve.add_argument(
        "--require-synchronous-replication",
        action="store_const",
        const=True,
        help="refuse to serve from a primary without a synchronous standby (env "
        "OFFSETSTORE_REQUIRE_SYNCHRONOUS_REPLICATION=1)",
    )
    serve.add_argument(
        "--trace-trust-callers",
        action="store_const",
        const=True,
        help="with OTEL_* tracing, let a caller's sampled traceparent flag raise sampling above "
        "OTEL_TRACES_SAMPLER's (env OFFSETSTORE_TRACE_TRUST_CALLERS=1)",
    )
    serve.add_argument("--grace-seconds", type=float, help="how long SIGTERM lets in-flight calls finish (default 10)")
    serve.add_argument("--group-metrics-limit", type=int, help="groups with per-group metrics (default 1000)")
    serve.add_argument(
        "--metrics-series-limit",
        type=int,
        help="per-group series on /metrics, shared fairly by tenants; a group beyond its share shows sums "
        "(default 20000; 0: no limit)",
    )
    serve.add_argument("--log-level", help="DEBUG, INFO, WARNING, ... (default INFO)")
    serve.add_argument("--log-format", choices=("text", "json"), help="log line format (default text)")
    serve.add_argument(
        "--max-message-bytes",
        type=int,
        help="largest request taken (default 48 MiB, which admits the largest valid one)",
    )
    serve.add_argument(
        "--max-response-bytes",
        type=int,
        help="largest FetchOffsets or DescribeGroup answer; larger ones come in pages (default 1 MiB)",
    )
    retention = serve.add_argument_group("retention (durations: 90s, 15m, 12h, 7d or seconds; see docs/operations.md)")
    retention.add_argument(
        "--history-retention",
        metavar="DURATION",
        help="history kept; older days are dropped whole (default 7d; 0 keeps everything)",
    )
    retention.add_argument(
        "--offsets-retention",
        metavar="DURATION",
        help="expire the offsets of groups with no commit, join or reset for this long (default 0 = never)",
    )
    retention.add_argument(
        "--maintenance-interval", metavar="DURATION", help="time between maintenance rounds (default 60s)"
    )
    serve.add_argument(
        "--status-window",
        metavar="DURATION",
        help="the group status verdict's window: no commit for this long with lag is STOPPED, an offset unmoved "
        "under commits this long STALLED (default 60s; docs/operations.md, Group status)",
    )
    mirror = serve.add_argument_group("Kafka mirror (off by default; see docs/operations.md)")
    mirror.add_argument(
        "--mirror-kafka-bootstrap", metavar="HOST:PORT,...", help="copy committed offsets to this Kafka cluster"
    )
    mirror.add_argument(
        "--mirror-kafka-groups", metavar="PREFIX[,PREFIX]", help="mirror the groups whose id starts with a prefix"
    )
    mirror.add_argument("--mirror-interval", metavar="DURATION", help="time between two mirror rounds (default 5s)")
    marks = serve.add_argument_group("server-side watermarks (off by default; see docs/operations.md)")
    marks.add_argument(
        "--watermarks-kafka-bootstrap",
        metavar="HOST:PORT,...",
        help="read the log start and end of the watched groups' partitions from this Kafka cluster",
    )
    marks.add_argument(
        "--watermarks-kafka-groups", metavar="PREFIX[,PREFIX]", help="watch the groups whose id starts with a prefix"
    )
    marks.add_argument(
        "--watermarks-kafka-topics",
        metavar="PREFIX[,PREFIX]",
        help="read only the topics of these prefixes (default: those a watched group's principals may report)",
    )
    marks.add_argument(
        "--watermarks-kafka-interval", metavar="DURATION", help="time between two reader rounds (default 5s)"
    )
    marks.add_argument(
        "--watermarks-kafka-max-partitions",
        type=int,
        metavar="N",
        help="partitions one round reads at most; beyond, round-robin (default 10000)",
    )
    marks.add_argument(
        "--watermarks-kafka-config",
        type=Path,
        metavar="FILE",
        help="librdkafka properties (security.protocol, sasl.*, ssl.*), one key=value a line",
    )
    security = serve.add_argument_group("security (off by default; see docs/security.md)")
    security.add_argument(
        "--tls-cert", dest="tls_cert_file", type=Path, metavar="PEM", help="server certificate chain: serve TLS"
    )
    security.add_argument("--tls-key", dest="tls_key_file", type=Path, metavar="PEM", help="private key of --tls-cert")
    security.add_argument(
        "--tls-client-ca",
        dest="tls_client_ca_file",
        type=Path,
        metavar="PEM",
        help="CA bundle that signs client certificates: require one of every client (mutual TLS)",
    )
    security.add_argument(
        "--metrics-tls",
        choices=("on", "off"),
        help="serve /metrics over TLS with --tls-cert (and require client certificates with --tls-client-ca); "
        "default: on whenever --tls-cert is given",
    )
    security.add_argument(
        "--reflection",
        choices=("on", "off", "authenticated"),
        help="server reflection (grpcurl, buf curl): open to everyone (default), off, or for authenticated callers",
    )
    security.add_argument(
        "--max-calls-per-principal",
        type=int,
        help="calls one principal may have running at once; more get RESOURCE_EXHAUSTED (default max-workers/4)",
    )
    security.add_argument(
        "--principal-bytes-per-second",
        type=int,
        help="response bytes one principal may read per second on average, bursts of 4 s (default 4 MiB; 0: no limit)",
    )
    security.add_argument(
        "--max-groups-per-principal",
        type=int,
        help="live groups one principal may create; more get RESOURCE_EXHAUSTED GROUP_QUOTA "
        "(default 0: no quota; max_groups in the tokens file wins)",
    )
    security.add_argument(
        "--max-partitions-per-principal",
        type=int,
        help="partitions one principal may store; calls adding more get RESOURCE_EXHAUSTED PARTITION_QUOTA "
        "(default 0: no quota; max_partitions in the tokens file wins)",
    )
    security.add_argument(
        "--principal-history-rows-per-second",
        type=float,
        help="history rows a principal under a partition quota may append per second, bursts of 10 s; more get "
        "RESOURCE_EXHAUSTED history_rows (default 1000; 0: no budget)",
    )
    security.add_argument("--max-streams", type=int, help="reflection streams open at once (default 4)")
    security.add_argument(
        "--tokens-file",
        type=Path,
        metavar="TOML",
        help="principals, SHA-256 of their bearer tokens, and grants by group prefix: require a token of every call",
    )

    token = sub.add_parser(
        "token",
        help="make a bearer token and the line of the tokens file that admits it",
        description="Print a new random bearer token and its token_sha256 for the tokens file. With --hash, "
        "read an existing token from standard input and print only its token_sha256.",
    )
    token.add_argument("--hash", action="store_true", help="hash the token read from standard input")

    migrate = sub.add_parser("migrate", help="apply the database migrations")
    migrate.add_argument("--database-url", help="PostgreSQL URL (env OFFSETSTORE_DATABASE_URL); unset = embedded")
    migrate.add_argument("--data-dir", type=Path, help="data directory of the embedded PostgreSQL")
    migrate.add_argument("--revision", default="head", help="target revision (default head)")
    migrate.add_argument(
        "--sql-api-roles",
        choices=("keep", "revoke"),
        help="across 0011: keep each SQL API v1 role's access on every group, or revoke it (default: stop and name them)",
    )

    groups = sub.add_parser("groups", help="inspect and manage consumer groups (like kafka-consumer-groups)")
    groups_cli.configure_parser(groups)

    completion = sub.add_parser(
        "completion",
        help="print a shell completion script",
        description="Print a completion script of every command and option: source <(offsetstore completion bash) "
        "in ~/.bashrc, or save it in bash-completion's directory. Zsh runs it after "
        "autoload -U bashcompinit && bashcompinit.",
    )
    completion.add_argument("shell", choices=["bash"])
    # What the script itself calls for a group's name: the groups starting with PREFIX on the server
    # the words typed so far name (their --server, TLS and token options), one a line.
    completion.add_argument("--groups", metavar="PREFIX", help=argparse.SUPPRESS)
    completion.add_argument("line", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
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


def _migrate(args: argparse.Namespace) -> int:
    import sqlalchemy.exc

    from offsetstore.runtime import migrate
    from offsetstore.server.config import Settings
    from offsetstore.storage import database_url

    try:
        settings = Settings.load(
            {"database_url": args.database_url, "data_dir": args.data_dir, "sql_api_roles": args.sql_api_roles}
        )
    except ValueError as error:
        print(f"offsetstore: {error}", file=sys.stderr)
        return 2
    if settings.database_url is not None:
        try:
            roles = migrate.upgrade(
                settings.database_url,
                args.revision,
                lock_timeout=settings.migration_lock_timeout,
                sql_api_roles=settings.sql_api_roles or None,
            )
            print(f"migrated to {migrate.current(settings.database_url)}")
            if roles:
                done = "kept their access on every group" if settings.sql_api_roles == "keep" else "lost their access"
                print(f"SQL API v1 roles that {done}: {', '.join(f'{r.role} ({r.access})' for r in roles)}")
        except migrate.SqlApiLockOut as error:
            print(f"offsetstore: {error}", file=sys.stderr)
            return 2
        except (migrate.LockWaitTimedOut, migrate.DatabaseAhead) as error:
            print(f"offsetstore: {error}", file=sys.stderr)
            return 1
        except (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError) as error:
            reason = str(getattr(error, "orig", error)).strip().splitlines()[0]
            print(
                f"offsetstore: cannot reach the database at {database_url.display(settings.database_url)}: {reason}",
                file=sys.stderr,
            )
            return 1
        return 0
    from offsetstore.runtime.embedded import EmbeddedPostgres

    with EmbeddedPostgres(settings.data_dir) as pg:
        migrate.upgrade(pg.url, args.revision, sql_api_roles=settings.sql_api_roles or None)
        print(f"migrated the embedded database in {settings.data_dir} to {migrate.current(pg.url)}")
    return 0


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
        if args.groups is not None:
            line = args.line[1:] if args.line[:1] == ["--"] else args.line
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
        return _migrate(args)
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
