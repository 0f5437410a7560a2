"""Pipeline definitions: the model, parsing YAML/JSON, schedules (design.md 1.1, 4, 5.6).

``definitions`` may use yaml, zoneinfo, cronsim and the core; it never imports the ledger,
execution, the API or the services, which call it.
"""
