import os

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")


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
