"""Hypothesis profiles: ``ci`` (the default, 2,000 examples a property) and ``fuzz``."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=2000,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "fuzz",
    max_examples=50_000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("quick", max_examples=100, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
