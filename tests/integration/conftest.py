import pytest

from needs import declared
from slurm import require_cluster  # noqa: F401  (tests import helpers from tests/integration/slurm.py)


@pytest.fixture
def cluster(request):
    """The real Slurm test cluster, which must be up (make check starts it), for a test marked `slurm`."""
    declared(request, "cluster")
    require_cluster()
