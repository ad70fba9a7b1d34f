"""The SQL API v1's callers an upgrade to its grants (migration 0011) would lock out, and the grants that keep them (issue 47).

Before 0011, EXECUTE on the four API functions let a role read (``read_offsets``) or commit
(``join_group``, ``begin_write``, ``commit_offsets``) every group. 0011 makes every such role
need a grant in ``offsetstore.sql_grants``, so a consumer that worked stops with OS003 the
moment it applies. :func:`roles_losing_access` names them before; :func:`keep_access`
grants each, in the migration's own transaction, what it could do before: its access on
every group (prefix ``''``), no quota.
"""

from __future__ import annotations

from typing import NamedTuple

from sqlalchemy import Connection, text

__all__ = ["NARROWING_REVISION", "RoleAccess", "keep_access", "roles_losing_access"]

#: The migration that narrows the SQL API's access: every role needs a grant from it on.
NARROWING_REVISION = "0011"

# Login roles (a session_user) that may run an API function, by a grant to them or to a
# role they belong to, and are not members of the schema's owner (0011 leaves those free).
_CALLERS = text(
    """
    SELECT r.rolname AS role,
           bool_or(p.proname <> 'read_offsets') AS commits
    FROM pg_roles AS r
    CROSS JOIN pg_proc AS p
    JOIN pg_namespace AS n ON n.oid = p.pronamespace
    WHERE n.nspname = 'offsetstore'
      AND p.proname IN ('join_group', 'begin_write', 'commit_offsets', 'read_offsets')
      AND r.rolcanlogin AND NOT r.rolsuper AND r.rolname NOT LIKE 'pg\\_%'
      AND NOT pg_has_role(r.oid, n.nspowner, 'MEMBER')
      AND has_function_privilege(r.oid, p.oid, 'EXECUTE')
    GROUP BY r.rolname
    ORDER BY r.rolname
    """
)


class RoleAccess(NamedTuple):
    """A role that calls the SQL API v1, and what it may do there: ``read`` or ``commit``."""

    role: str
    access: str


def roles_losing_access(conn: Connection) -> list[RoleAccess]:
    """The roles that may call the SQL API v1 on a database before :data:`NARROWING_REVISION`, by name."""
    return [RoleAccess(r.role, "commit" if r.commits else "read") for r in conn.execute(_CALLERS)]


def keep_access(conn: Connection, roles: list[RoleAccess]) -> None:
    """Grants each of ``roles`` its access on every group: what it could do before the grants existed."""
    for role in roles:
        conn.execute(
            text("SELECT offsetstore.grant_groups(:role, '', :access)"), {"role": role.role, "access": role.access}
        )
