"""The ``spark`` executor: each attempt one driver of a Spark standalone master."""
