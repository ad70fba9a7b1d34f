"""Hostile tenants (issue 14): no caller can blind, starve or impersonate another.

Each test runs a real server with authentication on (the PKI, tokens file and raw call
helpers of ``tests/fixtures/fix_auth.py``), attacks it as one tenant and checks what the others see.
Every attack is bounded in count and time and aims at 127.0.0.1 only.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import secrets
import signal
import subprocess
import sys
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import sqlalchemy as sa
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from offsetstore.cli import main as server_cli
from offsetstore.client import (
    OffsetStoreClient,
    PermissionDeniedError,
    UnauthenticatedError,
)
from offsetstore.core.types import Watermark
from offsetstore.runtime import migrate
from offsetstore.runtime.config import StoreConfig
from offsetstore.runtime.store import Store
from offsetstore.server import metrics
from offsetstore.server.app import SERVICE_NAME
from offsetstore.server.auth import AccessControl, AuthConfig, AuthConfigError, hash_token, server_credentials
from offsetstore.server.config import Settings
from offsetstore.server.limits import Limits
from offsetstore.server.security import security as _security
from offsetstore.server.security import tenant_prefixes as _tenant_prefixes
from offsetstore.v1 import offset_store_pb2 as pb
from tests.fixtures.dockerfile import healthcheck_command, read_dockerfile
from tests.fixtures.fix_auth import CA, PKI, TOKENS, Issued, bearer, call, fresh, reason_of
from tests.fixtures.fix_db import nothing_written
from tests.fixtures.fix_server import ServerHandle, free_port
from tests.fixtures.streams import open_reflection_streams
from tests.fixtures.waits import wait_for, wait_until_serving

INT64_MAX = 2**63 - 1
ROOT = Path(__file__).resolve().parents[2]


# --- 1. derived figures saturate; absurd watermarks are refused ----------------------------


def test_list_groups_survives_watermarks_whose_lag_overflows_int64(token_server: ServerHandle) -> None:
    topic, victim, attacker = fresh(), fresh(), fresh()
    # Listed between the two: the victim's page holds the attacker's group.
    victim, attacker = "t-lag-" + victim, "t-lag-" + attacker
    with OffsetStoreClient(token_server.address, token=TOKENS["committer"], timeout=20) as committer:
        committer.commit_offsets(victim, {(topic, 0): 1})
        committer.commit_offsets(attacker, {(topic, 0): 0, (topic, 1): 0})
        committer.report_watermarks([Watermark(topic, p, 0, INT64_MAX) for p in (0, 1)])
    with OffsetStoreClient(token_server.address, token=TOKENS["reader"], timeout=20) as reader:
        page = {g.group_id: g for g in reader.list_groups("t-lag-", page_size=1000).items}
        assert page[attacker].total_lag == INT64_MAX  # saturated, not overflowed
        assert page[victim].total_lag == INT64_MAX - 1
        described = reader.describe_group(attacker)
        assert {p.lag for p in described.partitions} == {INT64_MAX}


@pytest.mark.parametrize(
    ("start", "end"),
    [(5, 4), (-2, 10), (0, -1), (-1, -1)],
    ids=["end-before-start", "start-below-minus-one", "negative-end", "no-end"],
)
def test_absurd_watermarks_are_refused_and_nothing_is_written(token_server: ServerHandle, start: int, end: int) -> None:
    topic = fresh()
    request = pb.ReportWatermarksRequest(
        watermarks=[pb.Watermark(topic=topic, partition=0, log_start_offset=start, log_end_offset=end)]
    )
    code, reason, _ = call(token_server.address, "ReportWatermarks", request, bearer("committer"))
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")


# --- 6. an empty variable never turns authentication off ----------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("variable", ["OFFSETSTORE_TOKENS_FILE", "OFFSETSTORE_TLS_CLIENT_CA_FILE"])
def test_serve_refuses_to_start_on_an_empty_security_variable(database_url: str, variable: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OFFSETSTORE_")}
    result = subprocess.run(
        [sys.executable, "-m", "offsetstore.cli.main", "serve", "--database-url", database_url, "--no-migrate"],
        env={**env, variable: "", "OFFSETSTORE_LISTEN": "127.0.0.1:0", "OFFSETSTORE_METRICS_LISTEN": ""},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"{variable} is set but empty" in result.stderr


def test_authentication_off_on_a_network_address_is_a_loud_warning(pki: PKI, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="offsetstore.server.app"):
        assert _security(Settings(listen="0.0.0.0:50051")) == (None, None)
    assert "AUTHENTICATION IS OFF on 0.0.0.0:50051" in caplog.text
    # The HTTP API alone on a network address, gRPC on loopback (issue 34, low).
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="offsetstore.server.app"):
        assert _security(Settings(http_listen="0.0.0.0:8080")) == (None, None)
    assert "AUTHENTICATION IS OFF on 0.0.0.0:8080" in caplog.text
    for quiet in (
        Settings(listen="127.0.0.1:50051"),
        Settings(listen="[::1]:50051"),
        Settings(listen="0.0.0.0:50051", tokens_file=pki.tokens_file),
        Settings(http_listen="127.0.0.1:8080"),
        Settings(http_listen="[::1]:8080"),
        Settings(listen="0.0.0.0:50051", http_listen="0.0.0.0:8080", tokens_file=pki.tokens_file),
    ):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="offsetstore.server.app"):
            _security(quiet)
        assert "AUTHENTICATION IS OFF" not in caplog.text


# --- 5. certificates and tokens name principals in separate namespaces ---------------------


def issue(ca: CA, stem: str, subject: x509.Name, uris: tuple[str, ...] = ()) -> Issued:
    """A client certificate of ``ca`` with any subject (an empty one too) and URI SANs."""
    key = ec.generate_private_key(ec.SECP256R1())
    builder = ca._builder(subject, key.public_key()).add_extension(
        x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
    )
    if uris:
        # A certificate with an empty subject must mark its SANs critical (RFC 5280).
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.UniformResourceIdentifier(u) for u in uris]), critical=not subject
        )
    issued = Issued(ca.directory / f"{stem}.crt.pem", ca.directory / f"{stem}.key.pem")
    issued.cert.write_bytes(builder.sign(ca.key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM))
    issued.key.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return issued


def cn(name: str) -> x509.Name:
    # An empty CN is what the attacker sends, not what cryptography allows without a warning.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name, _validate=False)])


SPIFFE_ID = "spiffe://example.org/ns/prod/sa/t-billing"


@pytest.fixture(scope="module")
def spiffe_server(store: Store, pki: PKI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    """Mutual TLS with a tokens file that names a SPIFFE ID next to the test principals."""
    tokens = tmp_path_factory.mktemp("spiffe") / "tokens.toml"
    tokens.write_text(
        pki.tokens_file.read_text()
        + f'\n[principals."cert:URI={SPIFFE_ID}"]\ngrants = [{{ prefix = "t-", permissions = ["commit"] }}]\n'
    )
    auth = AccessControl(AuthConfig.load(tokens), mtls=True)
    credentials = server_credentials(pki.server.cert, pki.server.key, pki.ca.cert)
    with ServerHandle(store, auth=auth, credentials=credentials, limits=Limits(max_workers=8)) as server:
        yield server


def test_a_certificate_named_like_a_token_principal_gets_none_of_its_grants(
    spiffe_server: ServerHandle, pki: PKI, engine: sa.Engine
) -> None:
    group = fresh()
    root_credentials = pki.channel_credentials(pki.alice)  # mutual TLS: some certificate; the token decides
    with OffsetStoreClient(spiffe_server.address, credentials=root_credentials, token=TOKENS["root"]) as root:
        root.commit_offsets(group, {("orders", 0): 4})
    for name in ("root", "reader"):  # token principals of the file
        impostor = issue(pki.ca, f"impostor-{name}", cn(name))
        credentials = pki.channel_credentials(impostor)
        for method, request in (
            ("FetchOffsets", pb.FetchOffsetsRequest(group_id=group)),
            ("DeleteOffsets", pb.DeleteOffsetsRequest(group_id=group, all_topics=True)),
        ):
            code, reason, _ = call(spiffe_server.address, method, request, credentials=credentials)
            assert (code, reason) == (grpc.StatusCode.PERMISSION_DENIED, "PERMISSION_DENIED"), (name, method)
    with OffsetStoreClient(spiffe_server.address, credentials=root_credentials, token=TOKENS["root"]) as root:
        assert root.fetch_offsets(group).offsets[("orders", 0)].offset == 4


@pytest.mark.parametrize("server_name", ["spiffe_server", "mtls_only_server"])
def test_a_certificate_that_names_no_one_is_unauthenticated(
    request: pytest.FixtureRequest, pki: PKI, engine: sa.Engine, server_name: str
) -> None:
    server: ServerHandle = request.getfixturevalue(server_name)
    group = fresh()
    credentials = pki.channel_credentials(issue(pki.ca, "nameless", x509.Name([])))
    commit = pb.CommitOffsetsRequest(group_id=group, offsets=[pb.OffsetCommit(topic="t", partition=0, offset=1)])
    code, reason, _ = call(server.address, "CommitOffsets", commit, credentials=credentials)
    assert (code, reason) == (grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED")
    empty_cn = pki.channel_credentials(issue(pki.ca, "empty-cn", cn("")))
    code, reason, _ = call(server.address, "CommitOffsets", commit, credentials=empty_cn)
    assert (code, reason) == (grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED")
    assert nothing_written(engine, group)


def test_a_spiffe_id_names_a_certificate_principal(spiffe_server: ServerHandle, pki: PKI) -> None:
    group = fresh()
    # A SPIFFE SVID: no subject at all, one URI SAN; a CN next to it does not decide.
    for stem, subject in (("svid", x509.Name([])), ("svid-with-cn", cn("root"))):
        credentials = pki.channel_credentials(issue(pki.ca, stem, subject, (SPIFFE_ID,)))
        with OffsetStoreClient(spiffe_server.address, credentials=credentials) as billing:
            billing.commit_offsets(group, {("orders", 0): 2})
            with pytest.raises(PermissionDeniedError):
                billing.delete_offsets(group, all_topics=True)
            actors = {c.actor for c in billing.list_offset_history(group).items}
    assert actors == {f"cert:URI={SPIFFE_ID}"}


def test_a_grants_file_of_the_old_format_says_how_to_migrate() -> None:
    old = '[principals."reporting.example.com"]\ngrants = [{ prefix = "", permissions = ["read"] }]\n'
    with pytest.raises(AuthConfigError, match=r'rename it \[principals."cert:CN=reporting.example.com"\]'):
        AuthConfig.parse(old, "tokens.toml")
    for bad in ("cert:alice", "cert:CN=", "cert:URI="):
        with pytest.raises(AuthConfigError, match="cert:CN=<common name>"):
            AuthConfig.parse(f'[principals."{bad}"]\ngrants = []\n')
    with pytest.raises(AuthConfigError, match="has no tokens"):
        AuthConfig.parse(f'[principals."cert:CN=a"]\ntoken_sha256 = "{"0" * 64}"\n')
    # A token principal whose tokens are all rotated out says so with an empty list.
    assert AuthConfig.parse("[principals.a]\ntoken_sha256 = []\n").principals["a"].grants == ()


# --- 2. long-lived streams cannot take the RPC workers --------------------------------------


def list_services(target: str, metadata: tuple[tuple[str, str], ...] = ()) -> list[str]:
    with grpc.insecure_channel(target) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        response = next(stub.ServerReflectionInfo(iter([request]), metadata=metadata, timeout=10))
    return [s.name for s in response.list_services_response.service]


def test_idle_reflection_streams_cannot_starve_token_holders(store: Store, pki: PKI) -> None:
    auth = AccessControl(AuthConfig.load(pki.tokens_file))
    with ServerHandle(store, auth=auth, limits=Limits(max_workers=8)) as server:
        channels, calls, hang = open_reflection_streams(server.address, 20)
        try:
            deadline = time.monotonic() + 10
            while sum(c.done() for c in calls) < 16 and time.monotonic() < deadline:
                time.sleep(0.05)
            refused = [c for c in calls if c.done()]
            assert len(refused) == 16  # 4 streams (half of 8 workers) are served, the rest refused at once
            assert {c.code() for c in refused} == {grpc.StatusCode.RESOURCE_EXHAUSTED}
            assert reason_of(refused[0]) == "RESOURCE_EXHAUSTED"
            with OffsetStoreClient(server.address, token=TOKENS["committer"], timeout=5) as committer:
                group = fresh()
                for offset in range(10):
                    committer.commit_offsets(group, {("orders", 0): offset})
                assert committer.health() == "SERVING"
        finally:
            hang.set()
            for channel in channels:
                channel.close()


def test_a_stream_is_cancelled_after_its_time(store: Store) -> None:
    with ServerHandle(store, limits=Limits(max_workers=4, stream_seconds=0.5)) as server:
        channels, calls, hang = open_reflection_streams(server.address, 1)
        try:
            started = time.monotonic()
            assert calls[0].code() == grpc.StatusCode.CANCELLED
            assert time.monotonic() - started < 10
            assert SERVICE_NAME in list_services(server.address)  # its slot is free again
        finally:
            hang.set()
            channels[0].close()


def test_reflection_can_be_turned_off_or_require_authentication(store: Store, pki: PKI) -> None:
    auth = AccessControl(AuthConfig.load(pki.tokens_file))
    with ServerHandle(store, auth=auth, limits=Limits(max_workers=4, reflection="off")) as server:
        with pytest.raises(grpc.RpcError) as error:
            list_services(server.address, bearer("root"))
        assert error.value.code() == grpc.StatusCode.UNIMPLEMENTED
    with ServerHandle(store, auth=auth, limits=Limits(max_workers=4, reflection="authenticated")) as server:
        with pytest.raises(grpc.RpcError) as error:
            list_services(server.address)
        assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.RpcError) as error:
            list_services(server.address, (("authorization", "Bearer forged"),))
        assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert SERVICE_NAME in list_services(server.address, bearer("reader"))  # any principal
    with pytest.raises(ValueError, match="needs authentication"):
        ServerHandle(store, limits=Limits(reflection="authenticated"))
    with pytest.raises(ValueError, match="needs a tokens file"):
        Settings(reflection="authenticated")


# --- 4. no tenant can push another out of monitoring ----------------------------------------


def test_a_tenant_flooding_groups_pushes_out_only_its_own(scratch_database_url: str, pki: PKI) -> None:
    migrate.upgrade(scratch_database_url)  # a database of its own: the scrape reads every group
    store = Store.open(StoreConfig(scratch_database_url, hot_pool_size=4))
    auth = AccessControl(AuthConfig.load(pki.tokens_file))
    registry = metrics.build_registry(store, group_limit=50, tenant_prefixes=_tenant_prefixes(auth))
    try:
        with ServerHandle(
            store, auth=auth, interceptors=metrics.interceptors(registry), limits=Limits(max_workers=8)
        ) as server:
            victims = [f"v-orders-{i}" for i in range(3)]  # sorted after the attacker's ids
            with OffsetStoreClient(server.address, token=TOKENS["root"], timeout=20) as root:
                for group in victims:
                    root.commit_offsets(group, {("orders", 0): 7})
            with OffsetStoreClient(server.address, token=TOKENS["committer"], timeout=20) as attacker:
                for i in range(200):
                    attacker.join_group(f"t-flood-j{i:03}")
                for i in range(100):
                    attacker.commit_offsets(f"t-flood-c{i:03}", {("orders", 0): 1})
        families = {f.name: f for f in registry.collect()}
        shown = {sample.labels["group"] for sample in families["offsetstore_group_offset"].samples}
        assert set(victims) <= shown
        assert len(shown) == 50
        assert registry.get_sample_value("offsetstore_groups_omitted") == 103 - 50
    finally:
        store.dispose()


# --- 10. the container exposes nothing by default, and its probe speaks TLS ------------------


def test_compose_publishes_on_loopback_only() -> None:
    yaml = pytest.importorskip("yaml", reason="PyYAML is not installed")
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    published = [p for service in compose["services"].values() for p in service.get("ports", [])]
    assert published and all(p.startswith("127.0.0.1:") for p in published), published
    secure = yaml.safe_load((ROOT / "compose.tls.yaml").read_text())["services"]["offsetstore"]["environment"]
    assert {"OFFSETSTORE_TLS_CERT_FILE", "OFFSETSTORE_TOKENS_FILE"} <= set(secure)


@pytest.mark.parametrize("mutual", [False, True], ids=["tls", "mtls"])
def test_the_image_healthcheck_works_with_tls_on(store: Store, pki: PKI, tmp_path: Path, mutual: bool) -> None:
    final = read_dockerfile()[-1]
    command = healthcheck_command(final)
    credentials = server_credentials(pki.server.cert, pki.server.key, pki.ca.cert if mutual else None)
    auth = AccessControl(AuthConfig.load(pki.tokens_file), mtls=mutual)
    with ServerHandle(store, auth=auth, credentials=credentials, limits=Limits(max_workers=4)) as server:
        env = {
            "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
            "OFFSETSTORE_LISTEN": f"0.0.0.0:{server.port}",
            "OFFSETSTORE_TLS_CERT_FILE": str(pki.server.cert),
            "OFFSETSTORE_TLS_KEY_FILE": str(pki.server.key),
            "OFFSETSTORE_HEALTHCHECK_CA_FILE": str(pki.ca.cert),
        }
        if mutual:
            env["OFFSETSTORE_TLS_CLIENT_CA_FILE"] = str(pki.ca.cert)
            env["OFFSETSTORE_HEALTHCHECK_CERT_FILE"] = str(pki.alice.cert)
            env["OFFSETSTORE_HEALTHCHECK_KEY_FILE"] = str(pki.alice.key)
        result = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=30)
        assert result.returncode == 0, result.stderr
        # A probe that does not trust the server is unhealthy, not healthy by accident.
        env["OFFSETSTORE_HEALTHCHECK_CA_FILE"] = str(pki.rogue_ca.cert)
        result = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=30)
        assert result.returncode == 1


# --- 9. tokens file hygiene --------------------------------------------------------------------


def test_offsetstore_token_hash_refuses_weak_tokens(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    weak_tokens = (
        "hunter2",
        "a" * 64,
        "oncall-2024",
        # Long, many distinct characters, and no randomness at all (issue 22): counting,
        # counting down, repeats of a stretch, keyboard rows and columns.
        "0123456789abcdef0123456789abcdef",
        "0123456789ABCDEF" * 4,
        "fedcba9876543210" * 2,
        "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
        "abcabcabcabcabcabcabcabcabcabcabcabc",
        "qwertyuiopasdfghjklzxcvbnm1234567890",
        "1qaz2wsx3edc4rfv5tgb6yhn7ujm8ik9ol0p",
        "passwordpasswordpasswordpassword1234",
    )
    for weak in weak_tokens:
        monkeypatch.setattr(sys, "stdin", io.StringIO(weak + "\n"))
        assert server_cli.main(["token", "--hash"]) == 2, weak
        assert "too weak" in capsys.readouterr().err
    assert server_cli.main(["token"]) == 0
    token = capsys.readouterr().out.splitlines()[0].split()[-1]
    # Real random tokens always pass: ours, and 64 hex digits from any generator.
    randoms = [token] + [secrets.token_urlsafe(32) for _ in range(200)] + [secrets.token_hex(32) for _ in range(200)]
    for good in randoms:
        monkeypatch.setattr(sys, "stdin", io.StringIO(good + "\n"))
        assert server_cli.main(["token", "--hash"]) == 0, good
        assert capsys.readouterr().out == f'token_sha256 = "{hashlib.sha256(good.encode()).hexdigest()}"\n'


def test_a_tokens_file_others_can_read_is_a_warning(pki: PKI, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(pki.tokens_file.read_text())
    tokens.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="offsetstore.server.auth"):
        AuthConfig.load(tokens)
    assert "can be read by its group or by everyone (mode 644)" in caplog.text
    caplog.clear()
    tokens.chmod(0o600)
    with caplog.at_level(logging.WARNING, logger="offsetstore.server.auth"):
        AuthConfig.load(tokens)
    assert "can be read" not in caplog.text


@pytest.mark.slow
def test_sighup_reloads_the_tokens_file(database_url: str, pki: PKI, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(pki.tokens_file.read_text())
    tokens.chmod(0o600)
    address, log = f"127.0.0.1:{free_port()}", tmp_path / "serve.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OFFSETSTORE_")}
    args = ["serve", "--database-url", database_url, "--no-migrate", "--listen", address, "--metrics-listen", ""]
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "offsetstore.cli.main", *args, "--tokens-file", str(tokens)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**env, "OFFSETSTORE_DATA_DIR": str(tmp_path)},
        )
    try:
        new_token, group = f"rotated-{uuid.uuid4().hex}", fresh()
        with OffsetStoreClient(address, token=new_token, timeout=5) as rotated:
            wait_until_serving(rotated, process, log.read_text)  # up, and the new token not yet valid
            with pytest.raises(UnauthenticatedError):
                rotated.commit_offsets(group, {("orders", 0): 1})
            # The committer's current token rotated to a new one; the old one is gone.
            tokens.write_text(tokens.read_text().replace(hash_token(TOKENS["committer"]), hash_token(new_token)))
            process.send_signal(signal.SIGHUP)
            wait_for(lambda: "tokens file reloaded" in log.read_text(), "the tokens file reloaded", 20)
            rotated.commit_offsets(group, {("orders", 0): 1})
        with OffsetStoreClient(address, token=TOKENS["committer"], timeout=5) as old:
            with pytest.raises(UnauthenticatedError):
                old.commit_offsets(group, {("orders", 0): 2})
        # A broken file is refused and the one in force stays.
        tokens.write_text("[principals")
        process.send_signal(signal.SIGHUP)
        wait_for(lambda: "not reloaded" in log.read_text(), "the broken tokens file refused", 20)
        with OffsetStoreClient(address, token=new_token, timeout=5) as rotated:
            rotated.commit_offsets(group, {("orders", 0): 3})
    finally:
        process.terminate()
        assert process.wait(30) == 0, log.read_text()
