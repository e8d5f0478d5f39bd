import os

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")

GPU_FIXTURES = {"gpu90", "gpu100", "anygpu"}


def pytest_collection_modifyitems(items):
    """Mark every test that asks for a GPU fixture `gpu`, so `pytest -m gpu` (make stress) runs exactly those."""
    for item in items:
        if GPU_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.gpu)


def _gpu_or_skip(arch=None):
    """This machine's GPU when it can run `arch` (any GPU if None), else a skip that names what is missing."""
    import feedbeast as fb
    s = fb.needs(arch) if arch else fb.needs_gpu()
    if s is not None:
        pytest.skip(str(s))
    return fb.gpu()


@pytest.fixture
def gpu90():
    """The Hopper GPU, or a skip that names what is missing (never a pass)."""
    return _gpu_or_skip("sm_90a")


@pytest.fixture
def gpu100():
    """A Blackwell GPU (sm_100a), or a skip that names what is missing."""
    return _gpu_or_skip("sm_100a")


@pytest.fixture
def anygpu():
    return _gpu_or_skip()
