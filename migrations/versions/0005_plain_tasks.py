"""plain_task: a model's kernels as plain TVM extracts them, for exports that plain compile_relax can use

The registry tunes a model after rewriting it (fast math, channels-last convolutions with layout-free weights), so
its records are for kernels that plain TVM's ``compile_relax`` never makes. ``registry transfer`` and ``tune`` now also
record the kernels plain TVM extracts from the same model, and ``registry export -o`` gives each of them the
registry's schedule where its trace replays there.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-27 00:50:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "plain_task",
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("workload_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("task_name", sa.String(length=200), nullable=False),
        sa.Column("weight", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["model_id"], ["model.id"], name=op.f("fk_plain_task_model_id_model"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["workload_id"], ["workload.id"], name=op.f("fk_plain_task_workload_id_workload"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("model_id", "workload_id", name=op.f("pk_plain_task")),
    )
    with op.batch_alter_table("plain_task") as batch:
        batch.create_index(batch.f("ix_plain_task_workload_id"), ["workload_id"], unique=False)


def downgrade() -> None:
    op.drop_table("plain_task")
