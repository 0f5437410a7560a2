"""Golden histories: recorded event logs and what their fold must say (see format.py)."""
