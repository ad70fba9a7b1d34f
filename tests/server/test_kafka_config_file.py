"""The server-side watermark reader's Kafka client config may hold ``sasl.password``: others reading it is a warning (issue 47)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from offsetstore.server.kafka_watermarks import read_client_config


def test_a_kafka_config_others_can_read_is_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = tmp_path / "kafka.properties"
    config.write_text("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.username=os\nsasl.password=s3cret\n")
    config.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="offsetstore.server.kafka_watermarks"):
        assert read_client_config(config)["sasl.password"] == "s3cret"
    assert "can be read by its group or by everyone (mode 644)" in caplog.text
    assert "s3cret" not in caplog.text
    caplog.clear()
    config.chmod(0o600)
    with caplog.at_level(logging.WARNING, logger="offsetstore.server.kafka_watermarks"):
        read_client_config(config)
    assert "can be read" not in caplog.text
