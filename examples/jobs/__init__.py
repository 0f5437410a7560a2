"""Task code used by the example definitions (plain Python, imported by the worker)."""
