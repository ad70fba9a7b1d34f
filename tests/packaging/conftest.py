"""The packaging tests' fixtures: the wheel, built once a session (``tests/fixtures/installs.py``)."""

from tests.fixtures.installs import wheel

__all__ = ["wheel"]
