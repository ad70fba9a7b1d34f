"""Per-principal partition quota (issue 22): one huge group cannot grow past its principal's quota."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

from offsetstore.cli import groups as cli
from offsetstore.cli import main as server_cli
from offsetstore.client import OffsetStoreClient
from offsetstore.core.errors import PartitionQuotaError
from offsetstore.runtime.store import Store
from offsetstore.server.auth import AccessControl, AuthConfig, AuthConfigError, hash_token
from offsetstore.server.config import Settings
from offsetstore.server.limits import Limits
from offsetstore.server.security import security as _security
from tests.fixtures.fix_server import ServerHandle


def tokens_file(directory: Path, prefix: str, **quotas: int | None) -> dict[str, str]:
    """A tokens file of principals administering ``prefix``+name (resets too), with ``max_partitions``; their tokens."""
    tokens = {name: f"{name}-{uuid.uuid4().hex}" for name in quotas}
    lines = []
    for name, quota in quotas.items():
        lines += [
            f"[principals.{name}]",
            f'token_sha256 = "{hash_token(tokens[name])}"',
            f'grants = [{{ prefix = "{prefix}{name}-", permissions = ["admin"] }}]',
            *([f"max_partitions = {quota}"] if quota is not None else []),
        ]
    (directory / "tokens.toml").write_text("\n".join(lines) + "\n")
    (directory / "tokens.toml").chmod(0o600)
    return tokens


def stored(engine: sa.Engine, prefix: str) -> int:
    with engine.connect() as conn:
        return conn.execute(
            sa.text("SELECT count(*) FROM offsetstore.offsets WHERE starts_with(group_id, :p)"), {"p": prefix}
        ).scalar_one()


def test_calls_that_would_store_partitions_past_the_quota_are_refused_and_write_nothing(
    store: Store, engine: sa.Engine, tmp_path: Path
) -> None:
    run = f"p{uuid.uuid4().hex[:10]}-"
    tokens = tokens_file(tmp_path, run, small=10, flagged=None)
    auth = AccessControl(AuthConfig.load(tmp_path / "tokens.toml"))
    with ServerHandle(store, auth=auth, limits=Limits(max_workers=8, max_partitions_per_principal=6)) as server:
        with OffsetStoreClient(server.address, token=tokens["small"], timeout=20) as client:
            one, two = f"{run}small-1", f"{run}small-2"
            client.commit_offsets(one, {("orders", p): 1 for p in range(8)})
            # Re-committing stored partitions adds nothing: it passes at the quota, again and again.
            client.commit_offsets(one, {("orders", p): 2 for p in range(8)})
            with pytest.raises(PartitionQuotaError) as caught:  # another group: 8 + 3 > 10
                client.commit_offsets(two, {("orders", p): 1 for p in range(3)})
            assert caught.value.metadata["limit"] == "max_partitions"
            assert caught.value.metadata["max_partitions"] == "10"
            assert caught.value.metadata["partitions"] == "8"
            assert caught.value.metadata["new_partitions"] == "3"
            with pytest.raises(PartitionQuotaError):  # the same group, a wider commit
                client.commit_offsets(one, {("orders", p): 3 for p in range(11)})
            with pytest.raises(PartitionQuotaError):  # a reset naming new partitions
                client.reset_offsets(one, topics={"orders": list(range(12))}, to_offset=0)
            assert stored(engine, run) == 8
            assert client.fetch_offsets(one).offsets[("orders", 0)].offset == 2  # nothing written
            client.commit_offsets(two, {("orders", 0): 1, ("orders", 1): 1})  # 10: exactly the quota
            assert stored(engine, run) == 10
        with OffsetStoreClient(server.address, token=tokens["flagged"], timeout=20) as client:
            with pytest.raises(PartitionQuotaError) as caught:  # the server's flag: 6
                client.commit_offsets(f"{run}flagged-1", {("orders", p): 1 for p in range(7)})
            assert caught.value.metadata["max_partitions"] == "6"
    assert stored(engine, f"{run}flagged-") == 0


def test_an_import_past_the_quota_is_refused_and_writes_nothing(
    store: Store, engine: sa.Engine, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `groups import` sets placeholders by a reset naming the partitions (then commits real offsets).
    run = f"p{uuid.uuid4().hex[:10]}-"
    tokens = tokens_file(tmp_path, run, importer=10)
    plan = tmp_path / "offsets.csv"
    plan.write_text("".join(f"orders,{p},-2\n" for p in range(12)))
    auth = AccessControl(AuthConfig.load(tmp_path / "tokens.toml"))
    with ServerHandle(store, auth=auth, limits=Limits(max_workers=8)) as server:
        argv = ["import", str(plan), "--group", f"{run}importer-1", "--execute", "--server", server.address]
        code = cli.main([*argv, "--token", tokens["importer"]])
        assert code != 0
        assert "quota" in capsys.readouterr().err
    assert stored(engine, run) == 0


@pytest.mark.parametrize("value", ["-1", "true", '"5"'])
def test_a_bad_max_partitions_is_a_clear_startup_error(tmp_path: Path, value: str) -> None:
    bad = tmp_path / "tokens.toml"
    bad.write_text(
        f'[principals.a]\ntoken_sha256 = "{hash_token("t" * 40)}"\n'
        f'grants = [{{ prefix = "a-", permissions = ["commit"] }}]\nmax_partitions = {value}\n'
    )
    with pytest.raises(AuthConfigError, match=r"principals\.a: max_partitions must be an integer >= 0"):
        _security(Settings(tokens_file=bad))


def test_the_partition_flag_is_read_from_the_command_line_and_the_environment() -> None:
    args = server_cli._parser().parse_args(["serve", "--max-partitions-per-principal", "5000"])
    flags = {k: v for k, v in vars(args).items() if k != "command"}
    assert Settings.load(flags, environ={}).max_partitions_per_principal == 5000
    environ = {"OFFSETSTORE_MAX_PARTITIONS_PER_PRINCIPAL": "20"}
    assert Settings.load({}, environ=environ).max_partitions_per_principal == 20
    assert Settings.load({}, environ={}).max_partitions_per_principal == 0
    args = server_cli._parser().parse_args(["serve", "--metrics-series-limit", "500"])
    flags = {k: v for k, v in vars(args).items() if k != "command"}
    assert Settings.load(flags, environ={}).metrics_series_limit == 500
