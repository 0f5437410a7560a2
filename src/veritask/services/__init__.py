"""The application's commands and queries: the one place that ``api`` (and later ``ui``) calls.

Each module is a small set of functions over a :class:`~veritask.services.platform.Platform`
(the ledger and the data folder). Commands validate, record and return at once
(docs/api.md, Principles): nothing here waits for an engine. Errors are the ones of
:mod:`veritask.services.errors`; the API maps each to one problem document.

- ``definitions``: apply, list, show, enable/disable, the delete lifecycle.
- ``runs``: trigger, list, show runs and instances, histories, cancel.
- ``overrides``: an operator sets SUCCESS or FAILED on the current epoch, audited.
- ``callbacks``: worker reports and the output commit check (attempt tokens).
- ``logs``: tail and search an attempt's log.
- ``tokens``: API tokens and roles.
- ``runtime``: the scheduler process that ``veritask up`` and ``veritask scheduler`` start,
  with the scheduling layer's lease (one scheduler on SQLite).
"""
