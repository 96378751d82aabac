import pytest

from needs import declared
from slurm import cancel_workspace_jobs, require_cluster  # tests import helpers from tests/integration/slurm.py


@pytest.fixture
def cluster(request):
    """The real Slurm test cluster, which must be up (make check starts it), for a test marked `slurm`."""
    declared(request, "cluster")
    require_cluster()


@pytest.fixture
def extra_jobs(workspace):
    """Job ids a test submits outside tau's records; they and every job the test's runs recorded are cancelled at
    the end."""
    ids: list[str] = []
    yield ids
    cancel_workspace_jobs(workspace, ids)
