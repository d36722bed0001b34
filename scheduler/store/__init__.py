"""The store: SQLAlchemy engine and sessions, the tables, Alembic migrations and the leader lease."""
