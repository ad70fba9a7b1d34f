"""Per-principal group quota (issue 14): no tenant can flood the store with groups.

Each test runs a real server with a tokens file of its own, whose principals commit under
prefixes no other test uses, so the groups they count are the test's alone.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import grpc
import pytest
import sqlalchemy as sa

from offsetstore.cli import main as server_cli
from offsetstore.client import OffsetStoreClient, ResourceExhaustedError
from offsetstore.core.errors import GroupQuotaError
from offsetstore.runtime.config import StoreConfig
from offsetstore.runtime.store import Store, StoreObserver
from offsetstore.server.auth import AccessControl, AuthConfig, AuthConfigError, hash_token
from offsetstore.server.config import Settings
from offsetstore.server.limits import Limits
from offsetstore.server.security import security as _security
from offsetstore.v1 import offset_store_pb2 as pb
from tests.fixtures.fix_auth import call
from tests.fixtures.fix_db import nothing_written
from tests.fixtures.fix_server import ServerHandle

FLAG = 3  # --max-groups-per-principal of the servers below


class Tenants:
    """A tokens file of principals, each committing under a prefix of its own, and their tokens."""

    def __init__(self, directory: Path, permission: str = "commit", **quotas: int | None) -> None:
        self.run = f"q{uuid.uuid4().hex[:10]}-"
        self.tokens = {name: f"{name}-{uuid.uuid4().hex}" for name in (*quotas, "root")}
        lines = []
        for name, quota in quotas.items():
            lines += [
                f"[principals.{name}]",
                f'token_sha256 = "{hash_token(self.tokens[name])}"',
                f'grants = [{{ prefix = "{self.prefix(name)}", permissions = ["{permission}"] }}]',
                *([f"max_groups = {quota}"] if quota is not None else []),
            ]
        lines += [
            "[principals.root]",
            f'token_sha256 = "{hash_token(self.tokens["root"])}"',
            'grants = [{ prefix = "", permissions = ["admin"] }]',
        ]
        self.file = directory / "tokens.toml"
        self.file.write_text("\n".join(lines) + "\n")

    def prefix(self, name: str) -> str:
        return f"{self.run}{name}-"

    def group(self, name: str) -> str:
        return f"{self.prefix(name)}{uuid.uuid4().hex[:8]}"

    def client(self, server: ServerHandle, name: str) -> OffsetStoreClient:
        return OffsetStoreClient(server.address, token=self.tokens[name], timeout=20)


Serve = Callable[..., ServerHandle]


@pytest.fixture
def serve(store: Store) -> Iterator[Serve]:
    """Starts servers with a tokens file and the --max-groups-per-principal flag; stops them after the test."""
    with contextlib.ExitStack() as stack:

        def start(tenants: Tenants, max_groups: int = FLAG, on: Store = store) -> ServerHandle:
            auth = AccessControl(AuthConfig.load(tenants.file))
            server = ServerHandle(on, auth=auth, limits=Limits(max_workers=8, max_groups_per_principal=max_groups))
            return stack.enter_context(server)

        yield start


def fill(client: OffsetStoreClient, tenants: Tenants, name: str, count: int) -> list[str]:
    """``count`` new groups of ``name``, made by commits and joins alike."""
    made = []
    for i in range(count):
        group = tenants.group(name)
        if i % 2:
            client.join_group(group, "m")
        else:
            client.commit_offsets(group, {("orders", 0): i})
        made.append(group)
    return made


def live_groups(engine: sa.Engine, prefix: str) -> int:
    with engine.connect() as conn:
        return conn.execute(
            sa.text("SELECT count(*) FROM offsetstore.groups WHERE starts_with(group_id, :p) AND deleted_at IS NULL"),
            {"p": prefix},
        ).scalar_one()


def test_a_principal_at_its_quota_cannot_create_another_group(serve: Serve, tmp_path: Path, engine: sa.Engine) -> None:
    tenants = Tenants(tmp_path, a=None)
    server = serve(tenants)
    with tenants.client(server, "a") as a:
        fill(a, tenants, "a", FLAG)
        refused = tenants.group("a")
        with pytest.raises(ResourceExhaustedError) as caught:
            a.commit_offsets(refused, {("orders", 0): 1})
        error = caught.value
        assert isinstance(error, GroupQuotaError)
        assert error.reason == "GROUP_QUOTA"
        assert error.retry_after is None  # retrying does not help
        assert error.metadata["max_groups"] == str(FLAG) and error.metadata["groups"] == str(FLAG)
        assert "delete" in error.message.lower() and "higher quota" in error.message
        with pytest.raises(GroupQuotaError):
            a.join_group(refused, "m")
    headers = (("authorization", f"Bearer {tenants.tokens['a']}"),)
    for method, request in (
        ("CommitOffsets", pb.CommitOffsetsRequest(group_id=refused, offsets=[pb.OffsetCommit(topic="t", offset=1)])),
        ("JoinGroup", pb.JoinGroupRequest(group_id=refused, member_id="m")),
    ):
        code, reason, _ = call(server.address, method, request, headers)
        assert (code, reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "GROUP_QUOTA"), method
    assert nothing_written(engine, refused)
    assert live_groups(engine, tenants.prefix("a")) == FLAG


def test_an_empty_commit_creates_no_group_and_opens_no_way_past_the_quota(
    serve: Serve, tmp_path: Path, engine: sa.Engine
) -> None:
    # A commit of no offsets only checks the generation (the .proto declares its entries): at
    # the quota it is not refused, it writes nothing, and the group it named stays unknown, so
    # a real commit to it afterwards is refused like any other creation.
    tenants = Tenants(tmp_path, a=None)
    with tenants.client(serve(tenants), "a") as a:
        fill(a, tenants, "a", FLAG)
        unknown = tenants.group("a")
        assert a.commit_offsets(unknown, {}) == {}
        assert nothing_written(engine, unknown)
        with pytest.raises(GroupQuotaError):
            a.commit_offsets(unknown, {("orders", 0): 1})
    assert nothing_written(engine, unknown)
    assert live_groups(engine, tenants.prefix("a")) == FLAG


def test_at_the_quota_commits_and_joins_to_existing_groups_still_work(
    serve: Serve, tmp_path: Path, store: Store
) -> None:
    tenants = Tenants(tmp_path, a=None)
    with tenants.client(serve(tenants), "a") as a:
        groups = fill(a, tenants, "a", FLAG)
    # A second server has seen none of them: it finds them in the database.
    for server in (serve(tenants), serve(tenants)):
        with tenants.client(server, "a") as a:
            for group in groups:
                a.commit_offsets(group, {("orders", 1): 7})
                generation = a.join_group(group, "m")
                a.commit_offsets(group, {("orders", 1): 8}, generation=generation)
                assert a.fetch_offsets(group).offsets[("orders", 1)].offset == 8


def test_commits_to_a_group_the_server_has_seen_do_not_count_groups(
    serve: Serve, tmp_path: Path, database_url: str
) -> None:
    operations: list[str] = []
    watched = Store.open(
        StoreConfig(
            database_url, hot_pool_size=2, observer=StoreObserver(operation=lambda name, _: operations.append(name))
        )
    )
    try:
        tenants = Tenants(tmp_path, a=None)
        server = serve(tenants, on=watched)
        with tenants.client(server, "a") as a:
            group = tenants.group("a")
            a.commit_offsets(group, {("orders", 0): 1})
            assert operations.count("count_groups") == 1  # the creation was counted
            for offset in range(2, 12):
                a.commit_offsets(group, {("orders", 0): offset})
            a.join_group(group, "m")
        assert operations.count("count_groups") == 1  # and nothing after it
    finally:
        server.stop()  # before its store: it serves on the store's loop
        watched.dispose()


def test_a_reset_cannot_create_a_group_beyond_the_quota(serve: Serve, tmp_path: Path, engine: sa.Engine) -> None:
    tenants = Tenants(tmp_path, "admin", a=None)  # admin on its own prefix only: a quota applies
    server = serve(tenants)
    with tenants.client(server, "a") as a:
        fill(a, tenants, "a", FLAG)
        refused = tenants.group("a")
        assert a.reset_offsets(refused, topics={"orders": [0]}, to_offset=5, dry_run=True).dry_run  # creates nothing
        with pytest.raises(GroupQuotaError):
            a.reset_offsets(refused, topics={"orders": [0]}, to_offset=5)
    assert nothing_written(engine, refused)
    assert live_groups(engine, tenants.prefix("a")) == FLAG


def test_expiring_and_reviving_groups_cannot_grow_past_the_quota(
    serve: Serve, tmp_path: Path, engine: sa.Engine
) -> None:
    # Expire every group (idle for a microsecond), create new ones in the freed slots, then
    # commit to the expired ones again: each revival is a creation and must be checked.
    tenants = Tenants(tmp_path, "admin", a=None)
    server = serve(tenants)
    with tenants.client(server, "a") as a:
        groups = fill(a, tenants, "a", FLAG)
        for _ in range(3):
            a.expire_groups(timedelta(microseconds=1), prefix=tenants.prefix("a"), execute=True)
            groups += fill(a, tenants, "a", FLAG)
            for group in groups:
                with contextlib.suppress(GroupQuotaError):
                    a.commit_offsets(group, {("orders", 0): 9})
            assert live_groups(engine, tenants.prefix("a")) <= FLAG


def test_deleting_a_group_frees_a_slot(serve: Serve, tmp_path: Path, engine: sa.Engine) -> None:
    tenants = Tenants(tmp_path, a=None)
    server = serve(tenants)
    with tenants.client(server, "a") as a, tenants.client(server, "root") as root:
        groups = fill(a, tenants, "a", FLAG)
        with pytest.raises(GroupQuotaError):
            a.commit_offsets(tenants.group("a"), {("orders", 0): 1})
        root.delete_offsets(groups[0], all_topics=True)
        a.commit_offsets(tenants.group("a"), {("orders", 0): 1})  # the freed slot
        # The deleted group is no longer the tenant's: bringing it back is a creation too.
        with pytest.raises(GroupQuotaError):
            a.commit_offsets(groups[0], {("orders", 0): 1})
    assert live_groups(engine, tenants.prefix("a")) == FLAG


def test_another_principal_is_not_affected(serve: Serve, tmp_path: Path, engine: sa.Engine) -> None:
    tenants = Tenants(tmp_path, a=None, b=None)
    server = serve(tenants)
    with tenants.client(server, "a") as a, tenants.client(server, "b") as b:
        fill(a, tenants, "a", FLAG)
        with pytest.raises(GroupQuotaError):
            a.commit_offsets(tenants.group("a"), {("orders", 0): 1})
        fill(b, tenants, "b", FLAG)
    assert live_groups(engine, tenants.prefix("b")) == FLAG


def test_an_admin_on_every_group_has_no_quota(serve: Serve, tmp_path: Path, engine: sa.Engine) -> None:
    tenants = Tenants(tmp_path, a=None)
    with tenants.client(serve(tenants, max_groups=1), "root") as root:
        fill(root, tenants, "a", 4)  # in a's prefix, and above the flag
    assert live_groups(engine, tenants.prefix("a")) == 4


def test_the_tokens_files_max_groups_wins_over_the_flag(serve: Serve, tmp_path: Path, engine: sa.Engine) -> None:
    tenants = Tenants(tmp_path, low=1, high=FLAG + 2, unlimited=0)
    server = serve(tenants)
    for name, quota in (("low", 1), ("high", FLAG + 2)):
        with tenants.client(server, name) as client:
            fill(client, tenants, name, quota)
            with pytest.raises(GroupQuotaError) as caught:
                client.join_group(tenants.group(name), "m")
            assert caught.value.metadata["max_groups"] == str(quota)
        assert live_groups(engine, tenants.prefix(name)) == quota
    with tenants.client(server, "unlimited") as client:
        fill(client, tenants, "unlimited", FLAG + 1)  # max_groups = 0: no quota


def test_without_authentication_there_is_no_quota(store: Store, engine: sa.Engine) -> None:
    prefix = f"q{uuid.uuid4().hex[:10]}-"
    with ServerHandle(store, limits=Limits(max_workers=8, max_groups_per_principal=1)) as server:
        with OffsetStoreClient(server.address, timeout=20) as client:
            for i in range(3):
                client.commit_offsets(f"{prefix}{i}", {("orders", 0): 1})
    assert live_groups(engine, prefix) == 3


@pytest.mark.parametrize("value", ["-1", '"500"', "true", "1.5"])
def test_a_bad_max_groups_is_a_clear_startup_error(tmp_path: Path, value: str) -> None:
    bad = tmp_path / "tokens.toml"
    bad.write_text(
        f'[principals.a]\ntoken_sha256 = "{hash_token("t" * 40)}"\n'
        f'grants = [{{ prefix = "a-", permissions = ["commit"] }}]\nmax_groups = {value}\n'
    )
    with pytest.raises(AuthConfigError, match=r"principals\.a: max_groups must be an integer >= 0"):
        _security(Settings(tokens_file=bad))


def test_the_flag_is_read_from_the_command_line_and_the_environment() -> None:
    args = server_cli._parser().parse_args(["serve", "--max-groups-per-principal", "500"])
    flags = {k: v for k, v in vars(args).items() if k != "command"}
    assert Settings.load(flags, environ={}).max_groups_per_principal == 500
    environ = {"OFFSETSTORE_MAX_GROUPS_PER_PRINCIPAL": "20"}
    assert Settings.load({}, environ=environ).max_groups_per_principal == 20
    assert Settings.load({}, environ={}).max_groups_per_principal == 0
    with pytest.raises(ValueError, match="OFFSETSTORE_MAX_GROUPS_PER_PRINCIPAL"):
        Settings.load({}, environ={"OFFSETSTORE_MAX_GROUPS_PER_PRINCIPAL": "-1"})
