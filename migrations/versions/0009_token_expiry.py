"""api_token.expires_at: a token may be made to expire

`registry token create --expires 30d` stores when the token stops being admitted; the server refuses it from then
on, with a 401 that names its expiry. NULL (every token made before this revision, and one made without --expires)
never expires.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-29 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_token", schema=None) as batch_op:
        batch_op.add_column(sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("api_token", schema=None) as batch_op:
        batch_op.drop_column("expires_at")
