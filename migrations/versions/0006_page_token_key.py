"""A secret key of the store, shared by every server on the database: page tokens are signed with it.

Page tokens (FetchOffsets, DescribeGroup, ListGroups, ListOffsetHistory) carry where the next
page starts. Signed with an HMAC under this key, a token cannot be forged or altered, and one
server's token is good on every other server (and serving process) of the same database.
The key is made here, from the operating system's random source; only the store's role reads it.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# Alembic reads these four names.
revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "offsetstore"


def upgrade() -> None:
    keys = op.create_table(
        "secrets",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("value", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_secrets")),
        schema=SCHEMA,
    )
    op.bulk_insert(keys, [{"name": "page_token_key", "value": secrets.token_bytes(32)}])


def downgrade() -> None:
    op.drop_table("secrets", schema=SCHEMA)
