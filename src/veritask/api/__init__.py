"""The HTTP API: ``create_app(settings)`` serves ``/api/v2`` (the states of docs/state-machine.md),
``/api/v1`` (the coarse vocabulary, always with ``raw_state``), the callbacks that workers and
task code call with their attempt tokens, ``/healthz`` and ``/readyz``.

Routes call :mod:`veritask.services` only; errors become ``application/problem+json`` in one
place (``problems``). The reference is docs/api.md.
"""
