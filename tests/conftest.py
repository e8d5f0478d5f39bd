import os

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")

GPU_FIXTURES = {"gpu90", "anygpu"}


def pytest_collection_modifyitems(items):
    """Mark every test that asks for a GPU fixture `gpu`, so `pytest -m gpu` (make stress) runs exactly those."""
    for item in items:
        if GPU_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.gpu)


@pytest.fixture
def gpu90():
    """The Hopper GPU, or a skip that names what is missing (never a pass)."""
    import feedbeast as fb
    s = fb.needs("sm_90a")
    if s is not None:
        pytest.skip(str(s))
    return fb.gpu()


@pytest.fixture
def anygpu():
    import feedbeast as fb
    s = fb.needs_gpu()
    if s is not None:
        pytest.skip(str(s))
    return fb.gpu()
