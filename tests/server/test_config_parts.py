"""The typed configuration passed through: Settings -> Limits and HttpConfig -> the server's parts."""

from __future__ import annotations

import dataclasses
import ssl

import pytest

from offsetstore.runtime.store import Store
from offsetstore.server.config import Settings
from offsetstore.server.limits import Limits
from offsetstore.server.workers import http_config
from tests.fixtures.fix_auth import PKI
from tests.fixtures.fix_server import ServerHandle


def test_every_limit_is_taken_from_the_setting_of_its_name() -> None:
    """A limit added to Limits without its setting (or not carried by Settings.limits) fails here."""
    names = {f.name for f in dataclasses.fields(Limits)} - {"stream_seconds"}  # not a setting: a constant of the guard
    settings = {f.name for f in dataclasses.fields(Settings)}
    assert names <= settings | {"reflection"}, names - settings
    values = dict(
        max_workers=40,
        max_streams=3,
        max_calls_per_principal=7,
        principal_bytes_per_second=1234,
        principal_partitions_per_second=5000.0,
        max_groups_per_principal=5,
        max_partitions_per_principal=6,
        principal_history_rows_per_second=12.5,
        max_message_bytes=4096,
        reflection="off",
        processes=3,
        grpc_handshake_timeout=2.5,
        max_connections=900,
        max_connections_per_peer=16,
    )
    assert set(values) == names
    limits = Settings(**values).limits()  # type: ignore[arg-type]
    assert {name: getattr(limits, name) for name in names} == values


def test_each_process_admits_its_share_of_the_per_principal_limits() -> None:
    share = Limits(
        max_workers=40,
        principal_bytes_per_second=900,
        principal_history_rows_per_second=30,
        principal_partitions_per_second=6000,
        processes=3,
    ).share()
    assert share.calls_per_principal == 10 // 3  # a quarter of the workers, divided
    assert share.principal_bytes_per_second == 300
    assert share.principal_history_rows_per_second == 10
    assert share.principal_partitions_per_second == 2000
    assert share.processes == 1
    assert share.max_workers == 40  # what is not per principal stays whole
    # A call limit below the number of processes still lets each process admit one call.
    assert Limits(max_calls_per_principal=2, processes=4).share().calls_per_principal == 1


@pytest.mark.parametrize(
    ("limits", "reason"),
    [
        (dict(reflection="sometimes"), "reflection must be one of on, off, authenticated"),
        (dict(max_workers=4, max_streams=4), "max_streams must be >= 0 and below max_workers"),
        (dict(max_streams=-1), "max_streams must be >= 0"),
        (dict(processes=0), "processes must be >= 1"),
        (dict(grpc_handshake_timeout=0), "grpc_handshake_timeout must be above 0"),
        (dict(max_connections=0), "max_connections must be at least 1"),
        (dict(max_connections_per_peer=-1), "max_connections_per_peer must be >= 0"),
    ],
)
def test_bad_limits_are_refused_when_made(limits: dict[str, object], reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        Limits(**limits)  # type: ignore[arg-type]


def test_the_http_listener_is_composed_only_when_configured(pki: PKI) -> None:
    assert http_config(Settings()) is None
    plain = http_config(Settings(http_listen="127.0.0.1:0", http_allowed_hosts="a.example,,.corp.example"))
    assert plain is not None
    assert (plain.listen, plain.ssl_context, plain.allowed_hosts) == (
        "127.0.0.1:0",
        None,
        ("a.example", ".corp.example"),
    )
    tls = http_config(
        Settings(
            http_listen="127.0.0.1:0",
            tls_cert_file=pki.server.cert,
            tls_key_file=pki.server.key,
            tls_client_ca_file=pki.ca.cert,
        )
    )
    assert tls is not None and tls.ssl_context is not None
    assert tls.ssl_context.verify_mode == ssl.CERT_REQUIRED  # the gRPC server's client CA holds on HTTP too


def test_a_server_without_an_http_config_has_no_listener(store: Store) -> None:
    with ServerHandle(store, limits=Limits(max_workers=4)) as server:
        assert server.http is None
        assert server.limits.calls_per_principal == 1
    with pytest.raises(ValueError, match="needs authentication"):
        ServerHandle(store, limits=Limits(reflection="authenticated"))
