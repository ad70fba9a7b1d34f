"""Hostile tenants (issue 14): no caller can blind, starve or impersonate another.

Each test runs a real server with authentication on (the PKI, tokens file and raw call
helpers of ``test_auth``), attacks it as one tenant and checks what the others see.
Every attack is bounded in count and time and aims at 127.0.0.1 only.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import grpc
import pytest
import test_auth
from test_auth import PKI, TOKENS, bearer, call, fresh

from offsetstore.client import OffsetStoreClient
from offsetstore.client.types import Watermark
from offsetstore.server.app import OffsetStoreServer, _security
from offsetstore.server.config import Settings
from offsetstore.v1 import offset_store_pb2 as pb

INT64_MAX = 2**63 - 1

# The throwaway PKI and the tokens-file server of the auth tests.
pki = test_auth.pki
token_server = test_auth.token_server


# --- 1. derived figures saturate; absurd watermarks are refused ----------------------------


def test_list_groups_survives_watermarks_whose_lag_overflows_int64(token_server: OffsetStoreServer) -> None:
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
def test_absurd_watermarks_are_refused_and_nothing_is_written(
    token_server: OffsetStoreServer, start: int, end: int
) -> None:
    topic = fresh()
    request = pb.ReportWatermarksRequest(
        watermarks=[pb.Watermark(topic=topic, partition=0, log_start_offset=start, log_end_offset=end)]
    )
    code, reason, _ = call(token_server.address, "ReportWatermarks", request, bearer("committer"))
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")


# --- 6. an empty variable never turns authentication off ----------------------------------


@pytest.mark.parametrize("variable", ["OFFSETSTORE_TOKENS_FILE", "OFFSETSTORE_TLS_CLIENT_CA_FILE"])
def test_serve_refuses_to_start_on_an_empty_security_variable(database_url: str, variable: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OFFSETSTORE_")}
    result = subprocess.run(
        [sys.executable, "-m", "offsetstore.server.cli", "serve", "--database-url", database_url, "--no-migrate"],
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
    for quiet in (
        Settings(listen="127.0.0.1:50051"),
        Settings(listen="[::1]:50051"),
        Settings(listen="0.0.0.0:50051", tokens_file=pki.tokens_file),
    ):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="offsetstore.server.app"):
            _security(quiet)
        assert "AUTHENTICATION IS OFF" not in caplog.text
