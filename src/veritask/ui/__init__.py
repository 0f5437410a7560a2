"""The web UI: server-rendered pages over ``services`` (never the tables), live by SSE.

- ``app``: mounts the pages, the static files and the error pages on the API's application.
- ``session``: the signed session cookie and its CSRF token.
- ``i18n``: the English and Simplified Chinese catalogs; every string a page shows.
- ``rendering``: the Jinja environment, dates in the viewer's time zone, state badges.
- ``dag`` and ``gantt``: the run's graph and timeline as SVG, laid out here in Python.
- ``live``: the server-sent events that tell a page its data changed.
- ``pages``: one module per area: sign-in, definitions, runs, instances, health.
"""
