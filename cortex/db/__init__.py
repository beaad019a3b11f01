"""Database layer: SQLAlchemy models, engines and Alembic migrations."""
