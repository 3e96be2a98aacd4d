"""predictor: pre-trained cost models, versioned per device

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-24 16:51:07.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "predictor",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("device_id", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("tvm_version", sa.String(length=64), nullable=False),
        sa.Column("n_workloads", sa.Integer(), nullable=False),
        sa.Column("n_records", sa.Integer(), nullable=False),
        sa.Column("metrics_json", sa.Text(), nullable=False),
        sa.Column("blob", sa.LargeBinary(), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.text("(CURRENT_TIMESTAMP)"), nullable=False
        ),
        sa.ForeignKeyConstraint(
            ["device_id"], ["device.id"], name=op.f("fk_predictor_device_id_device"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_predictor")),
        sa.UniqueConstraint("device_id", "version", name=op.f("uq_predictor_device_id_version")),
    )


def downgrade() -> None:
    op.drop_table("predictor")
