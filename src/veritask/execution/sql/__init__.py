"""The SQL engine executor: a task that is one SQL statement runs inside a PostgreSQL server.

``markers`` holds the marker tables and the script an attempt runs; ``engine`` is the
Executor; ``connections`` maps the connection names of definitions to server URLs.
"""
