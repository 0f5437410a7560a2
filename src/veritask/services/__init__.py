"""The application's commands and queries: the one place that ``api``, ``ui`` and ``cli`` call.

Each module is a small set of functions over a :class:`~veritask.services.platform.Platform`
(the ledger and the data folder). Commands validate, record and return at once
(docs/api.md, Principles): nothing here waits for an engine. Errors are the ones of
:mod:`veritask.services.errors`; the API maps each to one problem document.

- ``definitions``: apply, list, show, enable/disable, the delete lifecycle.
- ``runs``, ``reading``, ``durations``: trigger, list and show runs and instances, their
  histories and where their time went, cancel.
- ``overrides``: an operator sets SUCCESS or FAILED on the current epoch, audited.
- ``callbacks``: worker reports and the output commit check (attempt tokens).
- ``logs``, ``log_format``: tail and search an attempt's log.
- ``tokens``, ``sessions``: API tokens and roles, the web UI's sign-in.
- ``alerts``, ``alert_delivery``, ``deadlines``: alerts and their lifecycle, sending them out,
  and the ``deadline`` alerts of runs late for their expected finish.
- ``metrics``, ``activity``, ``health``, ``doctor``: ``/metrics``, what the platform is doing
  now, readiness (the database and its schema), the environment's checks.
- ``operations``: verify, export, replay and purge the ledger, each recorded.
- ``runtime``: the scheduler process that ``veritask up`` and ``veritask scheduler`` start,
  with the scheduling layer's lease (one scheduler on SQLite).
- ``views``, ``errors``, ``platform``: the shapes returned, the errors raised, and what every
  service is given.
"""
