"""The ledger: the event log and the snapshots folded from it, on SQLite or PostgreSQL.

- ``schema``: the tables (SQLAlchemy Core); ``migrations/`` builds them, ``migrate`` runs it.
- ``dialects``: the engine for a URL and the few SQLite/PostgreSQL differences.
- ``errors``: ``LedgerError`` and its subclasses, translated from driver errors at the engine.
- ``runs``, ``definitions``: idempotent creation; ``runs.compare_and_set`` for snapshots.
- ``queries``, ``pagination``, ``rows``: the reads and what they return.
- ``retention``: the one path that deletes events.
- ``vocabulary``, ``columns``: the ledger's own enums and portable column types.
- ``observations``: what ``/metrics``, the health panel and ``doctor`` read.
- ``api_tokens``, ``ui_sessions``, ``operations_log``: tokens, web UI sessions, operations.
- ``database``: the ``Engine`` and ``Connection`` types the layers above hold.

Every statement on Veritask's own tables is written here; the layers above call these
modules' functions and never import SQLAlchemy (an import-linter contract).
"""
