"""The adversarial suite's fixtures (the parts are in harness.py; its report is printed by tests/conftest.py)."""

from __future__ import annotations

import pytest
from harness import Tally


@pytest.fixture
def tally(request) -> Tally:
    return Tally(request.node.name)
