"""GPU demand says whether the create named its GPU model.

``gpu_demand.model_named``: true when the request asked for a GPU model (a PCI alias or
Cyborg trait naming a product), false when it would take any GPU and ``model`` is only
where it went. The view's learned demand per model (``KnowledgeView.gpu_model_demand``,
read by ``weigher_gpu_model_reserve``) counts only the named ones against a model. Rows
written before this revision read false: their creates count as taking any GPU.

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-28
"""

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("gpu_demand") as batch:
        batch.add_column(sa.Column("model_named", sa.Boolean(), nullable=False,
                                   server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("gpu_demand") as batch:
        batch.drop_column("model_named")
