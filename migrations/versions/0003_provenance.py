"""provenance: record origin and trust, verification, this registry's id, sync state

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23 16:00:00.000000
"""

from __future__ import annotations

import uuid

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

# The preferred record of a pair: most trusted tier first (0 measured here or verified, 1 imported), then fastest.
BEST = """
INSERT INTO best_record (workload_id, device_id, record_id, mean_s, n_records, tier)
SELECT workload_id, device_id, id, mean_s, n, tier FROM (
    SELECT workload_id, device_id, id, mean_s,
           CASE WHEN trust IN ('measured', 'verified') THEN 0 ELSE 1 END AS tier,
           COUNT(*) OVER (PARTITION BY workload_id, device_id) AS n,
           ROW_NUMBER() OVER (
               PARTITION BY workload_id, device_id
               ORDER BY CASE WHEN trust IN ('measured', 'verified') THEN 0 ELSE 1 END, mean_s, id
           ) AS pick
    FROM tuning_record WHERE mean_s IS NOT NULL AND trust <> 'disputed'
) ranked WHERE pick = 1
"""


def upgrade() -> None:
    op.create_table(
        "registry_info",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("registry_id", sa.String(length=64), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.text("(CURRENT_TIMESTAMP)"), nullable=False
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_registry_info")),
    )
    registry_id = uuid.uuid4().hex
    op.execute(sa.text("INSERT INTO registry_info (id, registry_id) VALUES (1, :r)").bindparams(r=registry_id))
    op.create_table(
        "sync_state",
        sa.Column("source_id", sa.String(length=64), nullable=False),
        sa.Column("filters_key", sa.String(length=64), nullable=False),
        sa.Column("last_record_id", sa.BigInteger(), nullable=False),
        sa.Column(
            "synced_at", sa.DateTime(timezone=True), server_default=sa.text("(CURRENT_TIMESTAMP)"), nullable=False
        ),
        sa.PrimaryKeyConstraint("source_id", "filters_key", name=op.f("pk_sync_state")),
    )
    with op.batch_alter_table("tuning_record", schema=None) as batch_op:
        batch_op.add_column(sa.Column("origin", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("trust", sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column("verified_mean_s", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("verified_at", sa.DateTime(timezone=True), nullable=True))
    # Records imported from TVM logs came from somewhere unknown; everything else was measured by this registry.
    op.execute(
        sa.text(
            "UPDATE tuning_record SET "
            "origin = CASE WHEN source = 'imported' THEN 'tvm-log' ELSE :r END, "
            "trust = CASE WHEN source = 'imported' THEN 'imported' ELSE 'measured' END"
        ).bindparams(r=registry_id)
    )
    with op.batch_alter_table("tuning_record", schema=None) as batch_op:
        batch_op.alter_column("origin", existing_type=sa.String(length=64), nullable=False)
        batch_op.alter_column("trust", existing_type=sa.String(length=16), nullable=False)
        batch_op.drop_constraint("uq_tuning_record_workload_id_device_id_trace_hash", type_="unique")
        batch_op.create_unique_constraint(
            batch_op.f("uq_tuning_record_workload_id_device_id_trace_hash_origin"),
            ["workload_id", "device_id", "trace_hash", "origin"],
        )
    with op.batch_alter_table("best_record", schema=None) as batch_op:
        batch_op.add_column(sa.Column("tier", sa.Integer(), nullable=True))
    # Recomputed whole: a pair whose best was an imported record prefers a measured one from now on.
    op.execute("DELETE FROM best_record")
    op.execute(BEST)
    with op.batch_alter_table("best_record", schema=None) as batch_op:
        batch_op.alter_column("tier", existing_type=sa.Integer(), nullable=False)


def downgrade() -> None:
    with op.batch_alter_table("best_record", schema=None) as batch_op:
        batch_op.drop_column("tier")
    with op.batch_alter_table("tuning_record", schema=None) as batch_op:
        batch_op.drop_constraint("uq_tuning_record_workload_id_device_id_trace_hash_origin", type_="unique")
        batch_op.create_unique_constraint(
            batch_op.f("uq_tuning_record_workload_id_device_id_trace_hash"), ["workload_id", "device_id", "trace_hash"]
        )
        batch_op.drop_column("verified_at")
        batch_op.drop_column("verified_mean_s")
        batch_op.drop_column("trust")
        batch_op.drop_column("origin")
    op.drop_table("sync_state")
    op.drop_table("registry_info")
