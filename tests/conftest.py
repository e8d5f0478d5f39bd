import os
import sys

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")
# The course's hooks in this process and in the notebooks it runs (feedbeast.hooks): verdicts, the results log.
os.environ.setdefault("FEEDBEAST_HOOKS", "feedbeast.course")
os.environ.setdefault("FEEDBEAST_QUICK", "1")    # with a GPU, notebooks check and time a few sizes (fb.pick)

# Tests install and download nothing: pip and npm started by a test (or by make under it) may use what is on
# this machine only, and this process connects to loopback alone. A test that needs what is not here skips by name.
os.environ["PIP_NO_INDEX"] = "1"
os.environ["npm_config_offline"] = "true"

# The variables a make started by a test must not inherit from the `make test` it runs under: make exports its
# command line (make test WHEELS=dir CUDA=12 ...) to what it starts, and MAKEFLAGS would pass it on again.
OUTER_MAKE = ("WHEELS", "ENV", "CUDA", "VENV", "PYTHON3")


def module_from_source(folder, name: str, source: str):
    """A module imported from `source` written to folder/name.py: kernels with a file, which inspect can read (the
    barrier and compile checks read a kernel's source)."""
    import importlib.util
    path = folder / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def make_env(**extra) -> dict:
    """The environment for a `make` a test starts: this one without the outer make's settings, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS")) and k not in OUTER_MAKE}
    return env | extra



def _loopback_only():
    import ipaddress
    import socket
    connect = socket.socket.connect

    def guarded(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6):
            host = address[0]
            try:
                local = host == "localhost" or ipaddress.ip_address(host).is_loopback
            except ValueError:
                local = False
            if not local:
                raise OSError(f"the tests connect to loopback only, not to {host}: nothing is downloaded during a test run")
        return connect(self, address)
    socket.socket.connect = guarded


_loopback_only()


def _kernel_start_retried():
    """nbval starts each notebook's kernel once. jupyter_client picks the kernel's five ports free and the kernel
    binds them a moment later, so on a busy machine another process can take one in between and the kernel exits
    before its first reply ("Kernel died before replying to kernel_info"): that start is tried again, twice at most.
    A kernel that cannot start at all fails the third time, as before; a slow start (a timeout) is not retried."""
    try:
        from nbval import kernel
    except ImportError:
        return
    start = kernel.start_new_kernel

    def retried(*args, **kwargs):
        for attempt in range(3):
            try:
                return start(*args, **kwargs)
            except RuntimeError as e:
                if "died before replying" not in str(e) or attempt == 2:
                    raise
                # said in pytest's warnings summary, which a passing run prints too: a kernel that keeps dying shows
                import warnings
                warnings.warn(f"nbval: a notebook's kernel died before its first reply ({e}); started it again")
    kernel.start_new_kernel = retried


_kernel_start_retried()

GPU_FIXTURES = {"gpu90", "gpu100", "anygpu"}


def pytest_collection_modifyitems(items):
    """Mark every test that asks for a GPU fixture `gpu`, so `pytest -m gpu` (make stress) runs exactly those."""
    for item in items:
        if GPU_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.gpu)


def gpu_test_limit(environ=os.environ) -> float:
    """Seconds a GPU test may run (gpu_test_watchdog): FEEDBEAST_GPU_TEST_LIMIT_S, else 0 (off) under make stress
    (FEEDBEAST_STRESS set), else 900."""
    return float(environ.get("FEEDBEAST_GPU_TEST_LIMIT_S") or ("0" if environ.get("FEEDBEAST_STRESS") else "900"))


def gpu_test_watchdog(request):
    """A GPU test still running after FEEDBEAST_GPU_TEST_LIMIT_S seconds (default 900, the notebooks' cell time-out;
    0 turns it off; off by default under make stress, whose tests run many sizes) waits on a kernel that will not
    return, and a running kernel cannot be interrupted. faulthandler's watchdog, a thread that needs no GIL, then
    writes every thread's stack to stderr and ends this process: under pytest-xdist the worker is reported as
    crashed while running that test and replaced, and the run goes on; in one process the run ends (exit 1)."""
    limit = gpu_test_limit()
    if limit <= 0 or request.node.get_closest_marker("gpu") is None:
        yield
        return
    import faulthandler
    try:        # pytest's copy of the real stderr (fd 2 is captured while a test runs)
        from _pytest.faulthandler import fault_handler_stderr_fd_key
        out = request.config.stash.get(fault_handler_stderr_fd_key, None)
    except ImportError:
        out = None
    faulthandler.dump_traceback_later(limit, exit=True, file=out if out is not None else sys.__stderr__)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


_gpu_test_watchdog = pytest.fixture(autouse=True)(gpu_test_watchdog)


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


@pytest.fixture
def runner_modes(monkeypatch):
    """The mode each child of feedbeast.isolated's one runner (runner_command) is given, in order; the runner still
    runs as it would."""
    import contextlib
    import importlib
    iso = importlib.import_module("feedbeast.isolated")     # the module: fb.isolated is its function
    modes, real = [], iso.runner_command

    @contextlib.contextmanager
    def watched(values, code=None, mode=None):
        modes.append(mode)
        with real(values, code, mode) as cmd:
            yield cmd
    monkeypatch.setattr(iso, "runner_command", watched)
    return modes


@pytest.fixture
def h200_results(monkeypatch, tmp_path):
    """This process sees an H200 (for names and peaks: nothing is launched) and keeps its results log in tmp_path,
    which is also where the course's recorded results are read from: what a make bench run writes, a run without a
    GPU reads back."""
    import feedbeast as fb
    import feedbeast.device
    from feedbeast.course import results
    from feedbeast.device import Gpu
    h200 = Gpu(0, "NVIDIA H200", (9, 0), 132, 232448, 49152, 233472, 60 << 20, 1980, 3201, 6144, 13000, (13, 0),
               141 << 30)
    monkeypatch.setattr(feedbeast.device, "gpu", lambda index=0: h200)
    monkeypatch.setenv("FEEDBEAST_RESULTS", str(tmp_path))
    monkeypatch.setattr(results, "course_results", lambda: tmp_path)
    monkeypatch.setattr(fb.hooks, "on_bench", [results.append])
    return tmp_path


def on_first_use(make):
    """get(key): make(key) the first time a key is asked for, the same result after (a module fixture's
    expensive variants, such as a graded notebook, built only for the tests a `-k` selection runs)."""
    made = {}

    def get(key):
        if key not in made:
            made[key] = make(key)
        return made[key]
    return get


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """pytest-xdist: hand each worker the controller's resolved --dist (a worker's own option reads "no";
    `-d` makes it "load" whatever --dist says)."""
    node.workerinput["dist"] = node.config.getvalue("dist")
