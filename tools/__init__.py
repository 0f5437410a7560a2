"""Commands for maintainers (``make screenshots``); never run by the tests."""
