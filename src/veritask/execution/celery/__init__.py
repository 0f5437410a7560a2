"""The Celery executor: attempts run by Veritask Celery workers on other hosts.

``settings`` (URLs and timings, from the environment), ``app`` (the Celery application both
sides build), ``claims`` (the per-attempt records in Redis: submission, claim, lease, stop
request, refusals, log), ``task`` (what a Celery worker runs: the Veritask worker program),
``executor`` (the Executor), ``__main__`` (``python -m veritask.execution.celery``).
"""
