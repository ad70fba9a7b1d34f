"""Each setting's validity is declared once, with the setting, and the checks are made from it (issue 56, item 6)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from offsetstore.server.config import Settings
from offsetstore.server.settings import SettingFields, env_name, kinds

#: A value every declared range refuses (each is ">= 0", "> 0", ">= 1", or "between" positive bounds).
BELOW_EVERY_RANGE = -1


def _declared() -> list[dataclasses.Field[object]]:
    return [f for f in dataclasses.fields(SettingFields) if f.metadata["valid"] is not None]


def test_a_text_settings_choices_are_its_check() -> None:
    # Before, __post_init__ repeated each setting's choices by hand (log_format's it had forgotten).
    texts = [f for f in _declared() if isinstance(f.default, str)]
    assert {f.name for f in texts} == {"sql_api_roles", "database_prepare", "event_loop", "log_format", "reflection"}
    for f in texts:
        with pytest.raises(ValueError, match=f"^{env_name(f.name)} must be ") as refused:
            Settings(**{f.name: "sometimes"})  # type: ignore[arg-type]
        assert all(choice in str(refused.value) for choice in f.metadata["choices"])
        Settings(**{f.name: f.metadata["choices"][0]})  # type: ignore[arg-type]


def test_every_declared_range_refuses_a_value_below_it_naming_its_variable() -> None:
    ranges = [f for f in _declared() if not isinstance(f.default, str)]
    assert len(ranges) >= 20
    for f in ranges:
        with pytest.raises(ValueError, match=f"^{env_name(f.name)} must be "):
            Settings(**{f.name: BELOW_EVERY_RANGE})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"OFFSETSTORE_EVENT_LOOP": "trio"}, "OFFSETSTORE_EVENT_LOOP must be uvloop or asyncio"),
        ({"OFFSETSTORE_SQL_API_ROLES": "drop"}, "OFFSETSTORE_SQL_API_ROLES must be keep or revoke, or empty"),
        ({"OFFSETSTORE_PROCESSES": "300"}, r"OFFSETSTORE_PROCESSES must be between 1 and 256 \(or auto\)"),
        ({"OFFSETSTORE_MAX_CONNECTIONS": "0"}, "OFFSETSTORE_MAX_CONNECTIONS must be at least 1"),
        ({"OFFSETSTORE_STATUS_WINDOW": "0"}, "OFFSETSTORE_STATUS_WINDOW must be above 0"),
        ({"OFFSETSTORE_METRICS_SERIES_LIMIT": "-5"}, r"OFFSETSTORE_METRICS_SERIES_LIMIT must be at least 0 \(0: no"),
        ({"OFFSETSTORE_MAX_WORKERS": "4", "OFFSETSTORE_MAX_STREAMS": "4"}, "MAX_STREAMS must be >= 0 and below"),
        ({"OFFSETSTORE_POOL_SIZE": "2", "OFFSETSTORE_WRITE_FLUSHERS": "2"}, "WRITE_FLUSHERS must be at least 1 and"),
        ({"OFFSETSTORE_POOL_SIZE": "ten"}, "OFFSETSTORE_POOL_SIZE: cannot read 'ten' as int"),
    ],
)
def test_a_bad_variable_is_refused_with_its_name(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Settings.load({}, environ=environ)


def test_unset_optional_settings_and_empty_text_defaults_are_valid() -> None:
    settings = Settings.load({}, environ={"OFFSETSTORE_MAX_CONNECTIONS": "", "OFFSETSTORE_SQL_API_ROLES": ""})
    assert settings.max_connections is None and settings.sql_api_roles == ""


def test_types_come_from_the_resolved_annotations_not_their_text() -> None:
    # The module has `from __future__ import annotations`: a field's type is the text "int | None".
    assert kinds()["max_connections"] == (int, True)
    assert kinds()["metrics_tls"] == (bool, True)
    assert kinds()["tokens_file"] == (Path, True)
    assert kinds()["principal_partitions_per_second"] == (float, False)
    assert set(kinds()) == {f.name for f in dataclasses.fields(SettingFields)}
    loaded = Settings.load(
        {}, environ={"OFFSETSTORE_MAX_CONNECTIONS": "900", "OFFSETSTORE_MIGRATE": "off", "OFFSETSTORE_PROCESSES": "2"}
    )
    assert (loaded.max_connections, loaded.migrate, loaded.processes) == (900, False, 2)
