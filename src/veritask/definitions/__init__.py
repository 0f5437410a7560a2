"""Pipeline definitions: the model, parsing YAML/JSON, schedules (docs/definitions.md).

``definitions`` may use yaml, zoneinfo, cronsim and the core; it never imports the ledger,
execution, the API or the services, which call it.
"""
