"""Which topics the server's Kafka reader reads for a group, decided by tenants' grants only (issue 56, L1).

The reader reads with the server's own Kafka credentials, so it reads a group's partition only
where a tenant that may commit to the group may report the topic. A global admin may do
both for every group and topic: counted, one in the tokens file let a tenant name another
tenant's topic in a group of its own and read its watermarks. The tokens file here is the
suite's (tests/fixtures/fix_auth.py), whose ``root`` is admin on every group.
"""

from __future__ import annotations

import pytest

from offsetstore.server.auth import AuthConfig, hash_token
from offsetstore.server.kafka_topics import TopicPolicy
from tests.fixtures.fix_auth import TOKENS, TOKENS_FILE


@pytest.fixture
def config() -> AuthConfig:
    text = TOKENS_FILE.format(**{name: hash_token(token) for name, token in TOKENS.items()}, old=hash_token("old"))
    found = AuthConfig.parse(text)
    assert any(g.prefix == "" and g.permission.name == "ADMIN" for g in found.principals["root"].grants)
    return found


def test_a_global_admin_does_not_open_every_topic_to_a_tenants_group(config: AuthConfig) -> None:
    policy = TopicPolicy(principals=config.principals.values())
    # t- groups are the tenants' (committer, admin, cert:CN=alice); committer and admin may report t- topics.
    assert policy.allows("t-orders", "t-orders-topic")
    # Another tenant's topic named in a t- group: no t- tenant may report it. root may, and used to decide.
    assert not policy.allows("t-orders", "x-foreign")
    assert not policy.allows("t-orders", "")


def test_a_group_only_global_admins_write_has_its_topics_read(config: AuthConfig) -> None:
    policy = TopicPolicy(principals=config.principals.values())
    # No tenant may commit to an ops- group: its topics are the operators' choice.
    assert policy.allows("ops-mirror", "x-foreign")


def test_a_tokens_file_of_global_admins_only_reads_every_topic() -> None:
    only = AuthConfig.parse(
        '[principals.root]\ntoken_sha256 = []\ngrants = [{ prefix = "", permissions = ["admin"] }]\n'
    )
    assert TopicPolicy(principals=only.principals.values()).allows("any-group", "any-topic")


def test_without_a_tokens_file_every_topic_is_read() -> None:
    assert TopicPolicy().allows("t-orders", "x-foreign")
