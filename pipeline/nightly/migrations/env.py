"""Alembic's entry for the nightly store: run on the connection the store hands over
(pipeline/nightly/schema.py), never from an alembic.ini."""

from alembic import context

connection = context.config.attributes["connection"]
context.configure(connection=connection, render_as_batch=True)  # SQLite alters by copying
with context.begin_transaction():
    context.run_migrations()
