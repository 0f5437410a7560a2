"""The story builder lives in the package (the demo and the docs use it too)."""

from veritask.demo.story import T0, Story

__all__ = ["T0", "Story"]
