"""The ledger: the event log and the snapshots folded from it, on SQLite or PostgreSQL.

- ``schema``: the tables (SQLAlchemy Core); ``migrations/`` builds them, ``migrate`` runs it.
- ``dialects``: the engine for a URL and the few SQLite/PostgreSQL differences.
- ``errors``: ``LedgerError`` and its subclasses, translated from driver errors at the engine.
- ``runs``, ``definitions``: idempotent creation; ``runs.compare_and_set`` for snapshots.
- ``queries``, ``pagination``, ``rows``: the reads and what they return.
- ``retention``: the one path that deletes events.
- ``vocabulary``, ``columns``: the ledger's own enums and portable column types.
"""
