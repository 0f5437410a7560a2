"""examples/hello.yaml written in Python: the same definition, with the same content hash.

veritask apply -f examples/hello.py
veritask trigger hello --wait
"""

from __future__ import annotations

from veritask import pipeline, shell


@pipeline(name="hello", description="Print a greeting from a shell task", owner="you")
def hello() -> None:
    shell("""python3 -c 'print("hello from Veritask")'""", name="greet")
