"""Alembic migrations of the Cortex schema (shipped in the wheel as ``cortex_migrations``)."""
