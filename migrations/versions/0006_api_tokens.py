"""api_token: the tokens `registry serve` admits, each stored as its hash with a role

`registry token create` prints a token once; only its sha256 is kept. A request to `registry serve` names its token
(``Authorization: Bearer``), and the server admits it if its hash is here, not revoked, with a role that may do what
the request asks: reader (every GET), writer (and POST of a bundle), admin (and the token list).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-27 04:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_token",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.current_timestamp(), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("role IN ('reader', 'writer', 'admin')", name=op.f("ck_api_token_role")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_token")),
        sa.UniqueConstraint("name", name=op.f("uq_api_token_name")),
        sa.UniqueConstraint("digest", name=op.f("uq_api_token_digest")),
    )


def downgrade() -> None:
    op.drop_table("api_token")
