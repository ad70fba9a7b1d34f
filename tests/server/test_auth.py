"""TLS, mutual TLS and bearer tokens: who may call, what each principal may do, who the history names.

Certificates come from the throwaway CA of ``tests/fixtures/fix_auth.py``; the servers run
in-process over the session's store, one per security setup.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
import sqlalchemy as sa
from google.protobuf import duration_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from offsetstore.cli import groups as groups_cli
from offsetstore.cli import main as server_cli
from offsetstore.client import (
    AsyncOffsetStoreClient,
    OffsetStoreClient,
    PermissionDeniedError,
    StoreUnavailableError,
    UnauthenticatedError,
)
from offsetstore.server.auth import (
    RPC_PERMISSIONS,
    AuthConfig,
    AuthConfigError,
    Grant,
    Permission,
    Principal,
    hash_token,
    server_credentials,
)
from offsetstore.server.config import Settings
from offsetstore.v1 import offset_store_pb2 as pb
from tests.fixtures.fix_auth import PKI, SERVICE, TOKENS, bearer, call, fresh
from tests.fixtures.fix_db import nothing_written
from tests.fixtures.fix_server import ServerHandle, free_port
from tests.fixtures.waits import wait_until_serving

# --- the requests of the raw calls ------------------------------------------------------

REQUESTS: dict[str, Callable[[str], object]] = {
    "CommitOffsets": lambda g: pb.CommitOffsetsRequest(
        group_id=g, offsets=[pb.OffsetCommit(topic="t", partition=0, offset=5)]
    ),
    "FetchOffsets": lambda g: pb.FetchOffsetsRequest(group_id=g),
    "ResetOffsets": lambda g: pb.ResetOffsetsRequest(group_id=g, all_topics=True, to_offset=0),
    "DeleteOffsets": lambda g: pb.DeleteOffsetsRequest(group_id=g, all_topics=True),
    "JoinGroup": lambda g: pb.JoinGroupRequest(group_id=g, member_id="m"),
    "ListGroups": lambda g: pb.ListGroupsRequest(prefix=g),
    "DescribeGroup": lambda g: pb.DescribeGroupRequest(group_id=g),
    "ListOffsetHistory": lambda g: pb.ListOffsetHistoryRequest(group_id=g),
    # Not about a group: the topic is named like the caller's group id, and topic grants
    # cover the same prefixes as the group grants.
    "ReportWatermarks": lambda g: pb.ReportWatermarksRequest(
        watermarks=[pb.Watermark(topic=g, partition=0, log_start_offset=0, log_end_offset=10)]
    ),
    # Over every group the prefix covers; a preview, so nothing of other tests' groups is touched.
    "ExpireGroups": lambda g: pb.ExpireGroupsRequest(prefix=g, idle_for=duration_pb2.Duration(seconds=86400)),
    "ObserveOffsets": lambda g: pb.ObserveOffsetsRequest(
        group_id=g, offsets=[pb.OffsetCommit(topic="t", partition=0, offset=5)], source="kafka:test/g"
    ),
}
# What each RPC needs, written out here rather than read from the server's table.
NEEDS = {
    "FetchOffsets": "read",
    "DescribeGroup": "read",
    "ListOffsetHistory": "read",
    "ListGroups": "read",
    "ListTopics": "read",
    "CommitOffsets": "commit",
    "JoinGroup": "commit",
    "ReportWatermarks": "commit",
    "ResetOffsets": "admin",
    "DeleteOffsets": "admin",
    "ExpireGroups": "admin",
    "ObserveOffsets": "commit",
}
LEVEL = {"read": 1, "commit": 2, "admin": 3}
GRANTED = {"reader": "read", "committer": "commit", "admin": "admin"}


# --- the tokens file -----------------------------------------------------------------


def test_the_permission_table_covers_every_rpc() -> None:
    assert set(RPC_PERMISSIONS) == {m.name for m in SERVICE.methods} == set(NEEDS)
    assert {m: p.name.lower() for m, p in RPC_PERMISSIONS.items()} == NEEDS


def test_grants_imply_lower_permissions_on_their_prefix_only() -> None:
    p = Principal("p", (Grant("orders-", Permission.COMMIT), Grant("", Permission.READ)))
    assert p.may(Permission.READ, "anything")
    assert p.may(Permission.COMMIT, "orders-eu") and not p.may(Permission.COMMIT, "payments")
    assert not p.may(Permission.ADMIN, "orders-eu")
    assert not Principal("nobody").may(Permission.READ, "x")


def test_watermarks_need_a_topic_grant_or_admin_on_every_group() -> None:
    # A group grant, even admin on a prefix, says nothing about a topic every group reads.
    groups_only = Principal("g", (Grant("orders-", Permission.ADMIN),))
    assert not groups_only.may_report("orders")
    topics = Principal("t", (Grant("orders", Permission.COMMIT, topic=True), Grant("pay", Permission.READ, topic=True)))
    assert topics.may_report("orders.eu") and not topics.may_report("payments")
    assert not topics.may(Permission.READ, "orders")  # a topic grant is no group grant
    assert Principal("root", (Grant("", Permission.ADMIN),)).may_report("anything")


def test_a_principal_with_a_group_grant_cannot_move_another_tenants_resets(
    token_server: ServerHandle, engine: sa.Engine
) -> None:
    # The committer may commit to t-* groups; payments' watermarks steer every group's resets.
    topic = fresh("payments-")
    request = pb.ReportWatermarksRequest(
        watermarks=[
            pb.Watermark(topic=fresh("t-"), partition=0, log_end_offset=5),
            pb.Watermark(topic=topic, partition=0, log_end_offset=5),
        ]
    )
    code, reason, message = call(token_server.address, "ReportWatermarks", request, bearer("committer"))
    assert (code, reason) == (grpc.StatusCode.PERMISSION_DENIED, "PERMISSION_DENIED")
    assert topic in message
    with engine.connect() as conn:
        assert (
            conn.execute(
                sa.text("SELECT count(*) FROM offsetstore.watermarks WHERE topic = :t"), {"t": topic}
            ).scalar_one()
            == 0
        )
    code, _, _ = call(token_server.address, "ReportWatermarks", request, bearer("root"))
    assert code == grpc.StatusCode.OK


def test_tokens_are_looked_up_by_hash() -> None:
    config = AuthConfig.parse(
        f'[principals.a]\ntoken_sha256 = "{hash_token("secret-a")}"\ngrants = []\n'
        f'[principals.b]\ntoken_sha256 = ["{hash_token("b1")}", "{hash_token("b2")}"]\n'
        'grants = [{ prefix = "x", permissions = ["commit", "read"] }]\n'
    )
    assert config.by_token("secret-a") == Principal("a")
    assert config.by_token("b2") == Principal("b", (Grant("x", Permission.COMMIT),))
    assert config.by_token("secret-b") is None and config.by_token("") is None
    # The SHA-256 test vector of "abc", as `sha256sum` prints it.
    assert hash_token("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("[principals", "not valid TOML"),
        ("[principals.a]\ntoken = 'plain'\n", "unknown key(s) token"),
        ("[principals.a]\ntoken_sha256 = 'abc'\n", "64 hex digits"),
        ("[principals.a]\ngrants = [{ prefix = 'x', permissions = ['write'] }]\n", "unknown permission 'write'"),
        ("[principals.a]\ngrants = [{ prefix = 'x', permission = ['read'] }]\n", "unknown key(s) permission"),
        ("[principals.a]\ngrants = [{ permissions = ['read'] }]\n", "prefix must be a string"),
        ("[principals.a]\ngrants = [{ prefix = 'x', permissions = [] }]\n", "non-empty list"),
        ("[principals.a]\ngrants = [{ prefix = 'x', topic_prefix = 'x', permissions = ['commit'] }]\n", "not both"),
        (
            f"[principals.a]\ntoken_sha256 = '{'0' * 64}'\n[principals.b]\ntoken_sha256 = '{'0' * 64}'\n",
            "also given to a",
        ),
        ("[users.a]\n", "unknown key(s) users"),
    ],
)
def test_a_bad_tokens_file_is_refused_with_what_is_wrong(text: str, complaint: str) -> None:
    with pytest.raises(AuthConfigError) as error:
        AuthConfig.parse(text, "tokens.toml")
    assert complaint in str(error.value)
    assert str(error.value).startswith("tokens.toml")


# --- tokens -------------------------------------------------------------------------


def test_health_and_reflection_need_no_credentials(token_server: ServerHandle) -> None:
    with grpc.insecure_channel(token_server.address) as channel:
        health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=20)
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
        answers = list(
            reflection.ServerReflectionInfo(
                iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=20
            )
        )
        names = {s.name for s in answers[0].list_services_response.service}
        assert SERVICE.full_name in names


@pytest.mark.parametrize("method", sorted(REQUESTS))
@pytest.mark.parametrize(
    "metadata",
    [
        (),
        (("authorization", "Bearer not-a-token"),),
        (("authorization", "Basic cmVhZGVyOnNlY3JldA=="),),
        (("authorization", "Bearer "),),
        (("authorization", f"Bearer {TOKENS['root']}"), ("authorization", f"Bearer {TOKENS['root']}")),
    ],
    ids=["missing", "unknown", "not-bearer", "empty", "twice"],
)
def test_missing_or_wrong_tokens_are_unauthenticated_and_write_nothing(
    token_server: ServerHandle, engine: sa.Engine, method: str, metadata: tuple[tuple[str, str], ...]
) -> None:
    group = fresh()
    code, reason, message = call(token_server.address, method, REQUESTS[method](group), metadata)
    assert (code, reason) == (grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED")
    assert TOKENS["root"] not in message
    assert nothing_written(engine, group)


@pytest.mark.parametrize("method", sorted(REQUESTS))
@pytest.mark.parametrize("principal", sorted(GRANTED))
def test_each_principal_may_do_what_its_grant_allows_on_its_prefix_only(
    token_server: ServerHandle, engine: sa.Engine, method: str, principal: str
) -> None:
    allowed = LEVEL[GRANTED[principal]] >= LEVEL[NEEDS[method]]
    inside = fresh("t-")
    code, reason, _ = call(token_server.address, method, REQUESTS[method](inside), bearer(principal))
    if allowed:
        # Authorised; the call itself may still fail for its own reasons (an unknown group is NOT_FOUND).
        assert code in (grpc.StatusCode.OK, grpc.StatusCode.NOT_FOUND), (code, reason)
    else:
        assert (code, reason) == (grpc.StatusCode.PERMISSION_DENIED, "PERMISSION_DENIED")
        assert nothing_written(engine, inside)

    outside = fresh("u-")
    code, reason, message = call(token_server.address, method, REQUESTS[method](outside), bearer(principal))
    assert (code, reason) == (grpc.StatusCode.PERMISSION_DENIED, "PERMISSION_DENIED")
    assert principal in message
    assert nothing_written(engine, outside)


def test_a_refusal_does_not_echo_a_huge_group_id(token_server: ServerHandle) -> None:
    request = pb.FetchOffsetsRequest(group_id="u-" + "x" * 1_000_000)
    code, reason, message = call(token_server.address, "FetchOffsets", request, bearer("reader"))
    assert (code, reason) == (grpc.StatusCode.PERMISSION_DENIED, "PERMISSION_DENIED")
    assert len(message) < 300


def test_list_groups_needs_read_on_the_whole_prefix(token_server: ServerHandle) -> None:
    for prefix, expected in (
        ("t-", grpc.StatusCode.OK),
        ("t-abc", grpc.StatusCode.OK),
        ("t", grpc.StatusCode.PERMISSION_DENIED),
        ("", grpc.StatusCode.PERMISSION_DENIED),
    ):
        code, _, _ = call(token_server.address, "ListGroups", pb.ListGroupsRequest(prefix=prefix), bearer("reader"))
        assert code == expected, prefix
    code, _, _ = call(token_server.address, "ListGroups", pb.ListGroupsRequest(prefix=""), bearer("root"))
    assert code == grpc.StatusCode.OK


def test_the_history_names_the_principal(token_server: ServerHandle) -> None:
    group = fresh()
    with OffsetStoreClient(token_server.address, token=TOKENS["committer"]) as committer:
        committer.commit_offsets(group, {("orders", 0): 5})
    with OffsetStoreClient(token_server.address, token="old-token") as committer_old:
        committer_old.commit_offsets(group, {("orders", 0): 6})
    with OffsetStoreClient(token_server.address, token=TOKENS["admin"]) as admin:
        admin.reset_offsets(group, all_topics=True, to_offset=1)
        history = admin.list_offset_history(group).items
    assert [(c.new_offset, c.actor) for c in history] == [(1, "admin"), (6, "committer"), (5, "committer")]


def test_the_client_raises_typed_errors(token_server: ServerHandle) -> None:
    group = fresh()
    with OffsetStoreClient(token_server.address) as anonymous, pytest.raises(UnauthenticatedError):
        anonymous.fetch_offsets(group)
    with OffsetStoreClient(token_server.address, token=TOKENS["reader"]) as reader:
        with pytest.raises(PermissionDeniedError) as denied:
            reader.commit_offsets(group, {("orders", 0): 1})
        assert denied.value.reason == "PERMISSION_DENIED"
        assert reader.fetch_offsets(group).offsets == {}
    with pytest.raises(ValueError):
        OffsetStoreClient(token_server.address, token="two words")


def test_the_asyncio_client_sends_its_token_too(tls_server: ServerHandle, pki: PKI) -> None:
    group = fresh()

    async def run() -> list[str]:
        credentials = pki.channel_credentials()
        async with AsyncOffsetStoreClient(tls_server.address, credentials=credentials, token=TOKENS["committer"]) as c:
            await c.commit_offsets(group, {("orders", 0): 1})
            return [change.actor for change in (await c.list_offset_history(group)).items]

    assert asyncio.run(run()) == ["committer"]


# --- TLS ----------------------------------------------------------------------------


def test_tls_with_a_token_round_trips(tls_server: ServerHandle, pki: PKI) -> None:
    group = fresh()
    with OffsetStoreClient(
        tls_server.address, credentials=pki.channel_credentials(), token=TOKENS["committer"]
    ) as client:
        assert client.health() == "SERVING"
        client.commit_offsets(group, {("orders", 0): 7})
        assert client.fetch_offsets(group).offsets[("orders", 0)].offset == 7  # committer may read too
    with OffsetStoreClient(tls_server.address, credentials=pki.channel_credentials()) as anonymous:
        assert anonymous.health() == "SERVING"
        with pytest.raises(UnauthenticatedError):
            anonymous.fetch_offsets(group)


def test_tls_refuses_plaintext_and_clients_trusting_another_ca(tls_server: ServerHandle, pki: PKI) -> None:
    # No TLS handshake, no gRPC status from the server: the transport reports UNAVAILABLE.
    for credentials in (None, pki.channel_credentials(ca=pki.rogue_ca)):
        with OffsetStoreClient(tls_server.address, credentials=credentials, token=TOKENS["root"], timeout=10) as client:
            with pytest.raises(StoreUnavailableError):
                client.fetch_offsets(fresh())


def test_mtls_refuses_clients_without_a_certificate_of_its_ca(
    mtls_server: ServerHandle, pki: PKI, engine: sa.Engine
) -> None:
    group = fresh()
    for client_cert in (None, pki.rogue_alice):
        credentials = pki.channel_credentials(client_cert)
        with OffsetStoreClient(
            mtls_server.address, credentials=credentials, token=TOKENS["root"], timeout=10
        ) as client:
            with pytest.raises(StoreUnavailableError):
                client.commit_offsets(group, {("orders", 0): 1})
    assert nothing_written(engine, group)


def test_mtls_the_certificate_names_the_principal(mtls_server: ServerHandle, pki: PKI, engine: sa.Engine) -> None:
    group = fresh()
    with OffsetStoreClient(mtls_server.address, credentials=pki.channel_credentials(pki.alice)) as alice:
        alice.commit_offsets(group, {("orders", 0): 3})
        with pytest.raises(PermissionDeniedError):
            alice.commit_offsets(fresh("u-"), {("orders", 0): 3})
        with pytest.raises(PermissionDeniedError):
            alice.delete_offsets(group, all_topics=True)
    # A certificate of the CA whose CN the tokens file does not name: known, allowed nothing.
    with OffsetStoreClient(mtls_server.address, credentials=pki.channel_credentials(pki.mallory)) as mallory:
        assert mallory.health() == "SERVING"
        with pytest.raises(PermissionDeniedError):
            mallory.fetch_offsets(group)
        # A token, when sent, decides.
    with OffsetStoreClient(
        mtls_server.address, credentials=pki.channel_credentials(pki.mallory), token=TOKENS["admin"]
    ) as mallory_as_admin:
        mallory_as_admin.reset_offsets(group, all_topics=True, to_offset=0)
        history = mallory_as_admin.list_offset_history(group).items
    assert [c.actor for c in history] == ["admin", "cert:CN=alice"]


def test_mtls_alone_admits_every_client_of_the_ca(mtls_only_server: ServerHandle, pki: PKI) -> None:
    group = fresh("anything-")
    with OffsetStoreClient(mtls_only_server.address, credentials=pki.channel_credentials(pki.mallory)) as mallory:
        mallory.commit_offsets(group, {("orders", 0): 1})
        mallory.delete_offsets(group, topics={"orders": [0]})
        assert [c.actor for c in mallory.list_offset_history(group).items] == ["cert:CN=mallory"] * 2
    # Without a tokens file, a token is nothing the server can check.
    with OffsetStoreClient(
        mtls_only_server.address, credentials=pki.channel_credentials(pki.mallory), token="x"
    ) as with_token:
        with pytest.raises(UnauthenticatedError):
            with_token.fetch_offsets(group)


# --- settings, the serve flags and the groups CLI --------------------------------------


def test_settings_read_the_security_files_from_the_environment(tmp_path: Path) -> None:
    env = {
        "OFFSETSTORE_TLS_CERT_FILE": str(tmp_path / "c.pem"),
        "OFFSETSTORE_TLS_KEY_FILE": str(tmp_path / "k.pem"),
        "OFFSETSTORE_TLS_CLIENT_CA_FILE": str(tmp_path / "ca.pem"),
        "OFFSETSTORE_TOKENS_FILE": str(tmp_path / "t.toml"),
    }
    settings = Settings.load({}, env)
    assert settings.tls_cert_file == tmp_path / "c.pem" and settings.tokens_file == tmp_path / "t.toml"
    assert settings.tls and settings.tls_client_ca_file == tmp_path / "ca.pem"
    assert Settings.load({}, {}).tokens_file is None and not Settings.load({}, {}).tls
    with pytest.raises(ValueError, match="go together"):
        Settings.load({}, {"OFFSETSTORE_TLS_CERT_FILE": "c.pem"})
    with pytest.raises(ValueError, match="mutual TLS"):
        Settings.load({}, {"OFFSETSTORE_TLS_CLIENT_CA_FILE": "ca.pem"})


def test_server_credentials_name_the_file_that_is_wrong(tmp_path: Path, pki: PKI) -> None:
    with pytest.raises(AuthConfigError, match="TLS key"):
        server_credentials(pki.server.cert, tmp_path / "missing.pem")
    (tmp_path / "junk.pem").write_text("not a certificate")
    with pytest.raises(AuthConfigError, match="not PEM"):
        server_credentials(tmp_path / "junk.pem", pki.server.key)


def test_offsetstore_token_prints_a_token_and_its_hash(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert server_cli.main(["token"]) == 0
    lines = capsys.readouterr().out.splitlines()
    token = lines[0].split()[-1]
    assert lines[1] == f'token_sha256 = "{hash_token(token)}"'
    monkeypatch.setattr(sys, "stdin", io.StringIO(token + "\n"))
    assert server_cli.main(["token", "--hash"]) == 0
    assert capsys.readouterr().out.strip() == lines[1]


def groups(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="offsetstore groups")
    groups_cli.configure_parser(parser)
    return groups_cli.run(parser.parse_args(list(argv)))


def test_the_groups_cli_speaks_tls_and_tokens(
    tls_server: ServerHandle,
    mtls_server: ServerHandle,
    pki: PKI,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    group = fresh()
    with OffsetStoreClient(tls_server.address, credentials=pki.channel_credentials(), token=TOKENS["committer"]) as c:
        c.commit_offsets(group, {("orders", 0): 11})
    monkeypatch.delenv("OFFSETSTORE_TOKEN", raising=False)

    assert groups("describe", group, "--server", tls_server.address, "--tls-ca", str(pki.ca.cert)) == 1
    assert "OFFSETSTORE_TOKEN" in capsys.readouterr().err

    monkeypatch.setenv("OFFSETSTORE_TOKEN", TOKENS["reader"])
    assert (
        groups("describe", group, "--server", tls_server.address, "--tls-ca", str(pki.ca.cert), "--output", "json") == 0
    )
    assert '"offset": 11' in capsys.readouterr().out
    delete = ("delete", group, "--all-topics", "--execute", "--server", tls_server.address)
    assert groups(*delete, "--tls-ca", str(pki.ca.cert)) == 1
    assert "may not administer" in capsys.readouterr().err

    token_file = tmp_path / "token"
    token_file.write_text(TOKENS["admin"] + "\n")
    assert (
        groups(
            "list",
            "--prefix",
            "t-",
            "--server",
            tls_server.address,
            "--tls-ca",
            str(pki.ca.cert),
            "--token-file",
            str(token_file),
        )
        == 0
    )
    assert group in capsys.readouterr().out

    monkeypatch.delenv("OFFSETSTORE_TOKEN")
    mtls = (
        "--server",
        mtls_server.address,
        "--tls-ca",
        str(pki.ca.cert),
        "--tls-cert",
        str(pki.alice.cert),
        "--tls-key",
        str(pki.alice.key),
    )
    assert groups("describe", group, *mtls) == 0
    assert "11" in capsys.readouterr().out
    # Plaintext to a TLS server: the hint says how to speak TLS.
    assert groups("describe", group, "--server", tls_server.address, "--timeout", "5") == 1
    assert "--tls" in capsys.readouterr().err
    assert groups("list", "--server", tls_server.address, "--tls-cert", str(pki.alice.cert)) == 1
    assert "go together" in capsys.readouterr().err


@pytest.mark.slow
def test_offsetstore_serve_with_tls_and_tokens(database_url: str, pki: PKI, tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    log = tmp_path / "serve.log"
    args = [
        sys.executable,
        "-m",
        "offsetstore.cli.main",
        "serve",
        "--database-url",
        database_url,
        "--no-migrate",
        "--listen",
        address,
        "--metrics-listen",
        "",
        "--tls-cert",
        str(pki.server.cert),
        "--tls-key",
        str(pki.server.key),
        "--tokens-file",
        str(pki.tokens_file),
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(
            args, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "OFFSETSTORE_DATA_DIR": str(tmp_path)}
        )
    try:
        with OffsetStoreClient(address, credentials=pki.channel_credentials(), timeout=5) as anonymous:
            wait_until_serving(anonymous, process, log.read_text)
            with pytest.raises(UnauthenticatedError):
                anonymous.list_groups("t-")
        group = fresh()
        with OffsetStoreClient(address, credentials=pki.channel_credentials(), token=TOKENS["committer"]) as client:
            client.commit_offsets(group, {("orders", 0): 1})
            assert client.list_offset_history(group).items[0].actor == "committer"
    finally:
        process.terminate()
        assert process.wait(30) == 0, log.read_text()
    assert TOKENS["committer"] not in log.read_text()


@pytest.mark.slow
def test_offsetstore_serve_refuses_to_start_with_a_bad_tokens_file(database_url: str, tmp_path: Path) -> None:
    bad = tmp_path / "tokens.toml"
    bad.write_text("[principals.a]\ntoken_sha256 = 'plaintext-token'\n")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "offsetstore.cli.main",
            "serve",
            "--database-url",
            database_url,
            "--no-migrate",
            "--listen",
            f"127.0.0.1:{free_port()}",
            "--metrics-listen",
            "",
            "--tokens-file",
            str(bad),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "64 hex digits" in result.stderr + result.stdout
    assert "plaintext-token" not in result.stderr + result.stdout


def test_metrics_are_served_over_tls_with_the_servers_certificate(pki: PKI) -> None:
    import ssl
    import urllib.error
    import urllib.request

    from prometheus_client import CollectorRegistry, Counter

    from offsetstore.server import metrics

    registry = CollectorRegistry()
    Counter("probe", "a series to find", registry=registry).inc()
    served = metrics.serve_http(
        registry,
        "127.0.0.1:0",
        certfile=pki.server.cert,
        keyfile=pki.server.key,
        client_cafile=pki.ca.cert,
    )
    try:
        assert served.url.startswith("https://")
        trusting = ssl.create_default_context(cafile=str(pki.ca.cert))
        trusting.load_cert_chain(str(pki.alice.cert), str(pki.alice.key))
        with urllib.request.urlopen(served.url, context=trusting, timeout=10) as response:
            assert "probe_total 1.0" in response.read().decode()
        # Without a client certificate, or in plaintext, nothing is read.
        anonymous = ssl.create_default_context(cafile=str(pki.ca.cert))
        with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
            urllib.request.urlopen(served.url, context=anonymous, timeout=10).read()
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            urllib.request.urlopen(served.url.replace("https://", "http://"), timeout=10).read()
    finally:
        served.shutdown()
