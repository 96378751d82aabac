import pytest

from slurm import require_cluster  # noqa: F401  (tests import helpers from tests/integration/slurm.py)


@pytest.fixture
def cluster():
    """The real Slurm test cluster, which must be up (make check starts it)."""
    require_cluster()
