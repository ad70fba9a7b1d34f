"""Revision scripts of the store's schema, applied in order by Alembic."""
