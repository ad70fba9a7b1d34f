"""The Patroni tests' fixtures: etcd and three Patroni members of their own, from Debian's packages."""

from tests.fixtures.fix_patroni import patroni

__all__ = ["patroni"]
