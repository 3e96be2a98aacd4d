"""task_effort: how hard each workload was searched on each device, and the lease of the run tuning it

One row per (workload, device) that a `registry tune` run has touched: the trials and seconds every run spent on it,
its best latency over those trials, whether that curve reached a plateau, and the run that holds it now with the
time its lease expires. Runs sharing a registry divide tasks by these leases (see registry/pipeline/effort.py).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-27 06:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "task_effort",
        sa.Column("workload_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("device_id", sa.Integer(), nullable=False),
        sa.Column("trials", sa.Integer(), server_default="0", nullable=False),
        sa.Column("seconds", sa.Float(), server_default="0", nullable=False),
        sa.Column("curve_json", sa.Text(), server_default="[]", nullable=False),
        sa.Column("plateau", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("holder", sa.String(length=200), nullable=True),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.func.current_timestamp(), nullable=False),
        sa.CheckConstraint("trials >= 0 AND seconds >= 0", name=op.f("ck_task_effort_effort")),
        sa.PrimaryKeyConstraint("workload_id", "device_id", name=op.f("pk_task_effort")),
    )


def downgrade() -> None:
    op.drop_table("task_effort")
