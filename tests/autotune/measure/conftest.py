import pytest

import bad_candidates


@pytest.fixture(autouse=True, scope="module")
def _no_bad_intrinsics_left_behind():
    """The bad-candidate intrinsics a module registers are gone when it ends."""
    yield
    bad_candidates.unregister()
