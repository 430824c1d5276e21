"""Shared test configuration: deterministic hypothesis profile, thread helpers."""
import os
import sys

import pytest
from hypothesis import HealthCheck, settings

sys.path.insert(0, os.path.dirname(__file__))  # tests/reference is importable as `reference`

# Under sanitizers everything runs ~10x slower: fewer examples, same properties.
_SAN = os.environ.get("PYFASTPIM_SANITIZED") == "1"
settings.register_profile("pyfastpim", max_examples=8 if _SAN else 40, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile("pyfastpim")


@pytest.fixture
def sanitized():
    return _SAN
