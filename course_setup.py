"""Installs the course into the running Python when it is missing there (the setup cell of every notebook runs it).

In the course's environment (`make lab`, `make test`) it does nothing. Opened elsewhere (a hosted notebook, another
Jupyter, an editor) it installs from FEEDBEAST_SRC (a folder, wheel or URL that pip accepts) or else from the checkout
it stands in, with the CUDA wheels that match the driver: cu13 for a CUDA 13 driver (R580+) or none, else cu12,
held to the checkout's pins of the compiler and disassembler (the SASS the chapters discuss is that NVRTC's).
Standard library only: it runs before the course is importable. `python course_setup.py` does the same.
"""
import ctypes
import importlib
import importlib.metadata
import importlib.util
import os
import pathlib
import re
import site
import subprocess
import sys
import tempfile


class RestartNeeded(Exception):
    """pip replaced a package this kernel had imported: raised, so that Run All stops here rather than run the next
    cells on a mix of old and new modules; shown in Jupyter as its one line (IPython's _render_traceback_)."""

    def _render_traceback_(self):
        return [f"RestartNeeded: {self}"]


class _UntilRestart:
    """An import finder that refuses the course in this process after RestartNeeded: the setup cell run again (the
    course is importable now, so it would pass silently) and the next cells stop too, until the kernel restarts
    (a new process, as the grader is, has no such finder)."""

    def __init__(self, message: str):
        self.message = message

    def find_spec(self, name, path=None, target=None):
        if name == "feedbeast" or name.startswith("feedbeast."):
            raise RestartNeeded(self.message)
        return None


# The package index has no macOS wheels of these (the Makefile stops with the same words).
MACOS = ("the course cannot be installed on macOS: NVIDIA publishes its compiler (NVRTC), disassembler (nvdisasm) and "
         "CUDA Python (cuda-bindings, cuda-core, numba-cuda) for Linux and Windows only. Run it on a Linux machine (a "
         "Linux container on this Mac is one) or in a hosted notebook (README: Start). Nothing was installed")


def cuda_extra() -> str:
    """cu13 or cu12, by the driver's CUDA version; cu13 without a driver (compile-only machines)."""
    try:
        v = ctypes.c_int(0)
        ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(v))
    except OSError:
        return "cu13"
    return "cu13" if v.value >= 13000 or v.value == 0 else "cu12"


def source() -> str:
    """What pip installs from, as a URL: FEEDBEAST_SRC, or else the checkout this file stands in."""
    src = os.environ.get("FEEDBEAST_SRC") or str(pathlib.Path(__file__).resolve().parent)
    return src if "://" in src or src.startswith("git+") else pathlib.Path(src).resolve().as_uri()


def toolchain_pins(extra: str) -> list[str]:
    """The checkout's pins of what decides the machine code and how it is read (NVRTC and the CUDA wheels, the
    disassembler, the bindings, numba-cuda), without extras as pip's constraints want them. Everything else
    stays as the host has it within pyproject.toml's bounds: a hosted notebook's numpy or PyTorch is not the
    course's to replace (numpy 2.5 is, until numba-cuda imports it; install() says when a restart is needed)."""
    pins = []
    for name in ("base.txt", f"{extra}.txt"):
        path = pathlib.Path(__file__).resolve().parent / "requirements" / name
        for line in path.read_text().splitlines() if path.is_file() else []:
            m = re.match(r"((?:cuda|nvidia)-[\w.-]+|numba-cuda)(?:\[[^\]]*\])?(==\S+)$", line.split("#")[0].strip())
            if m:
                pins.append(m[1] + m[2])
    return pins


def install() -> None:
    spec = importlib.util.find_spec("feedbeast")
    if spec is not None and spec.origin is not None:   # a clone folder named feedbeast is a namespace, no package
        return
    if sys.platform == "darwin":   # pip would fail on the first CUDA wheel, after a minute, with no word of why
        raise RuntimeError(MACOS)
    extra = cuda_extra()
    dirs = [*site.getsitepackages(), site.getusersitepackages()]
    pth = lambda: {p for d in dirs for p in pathlib.Path(d).glob("*.pth")}
    before = pth()
    loaded, had = loaded_distributions(), installed_distributions()
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as pins:
        pins.write("\n".join(toolchain_pins(extra)) + "\n")
    # Quiet pip says nothing while it works: say what is coming (measured on a fresh Python 3.12: about 0.3 GB to
    # download, 0.9 GB on disk, most of it CUDA's, the compiler's and llvmlite; 20 s on a fast network)
    print(f"installing the course ({extra}) from {source()} into {sys.executable}: about 0.3 GB of wheels to "
          "download on a fresh Python (0.9 GB on disk), a minute or less ...", flush=True)
    try:
        subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "-c", pins.name,
                               f"feedbeast[{extra},course] @ {source()}"])
    except subprocess.CalledProcessError as e:
        raise RuntimeError(
            f"pip could not install the course from {source()} (exit status {e.returncode}): its last ERROR above "
            "says why (a FEEDBEAST_SRC that names no folder, wheel or URL pip takes; no network). Without a "
            "network, bring a wheel bundle of the course for this Python and driver (make wheelhouse "
            f"PY={sys.version_info[0]}.{sys.version_info[1]}{' CUDA=12' if extra == 'cu12' else ''}, on a machine "
            "with internet) and set PIP_NO_INDEX=1 and "
            "PIP_FIND_LINKS=<its folder> (or run in an environment that has the course); then run this cell "
            "again.") from None
    finally:
        os.unlink(pins.name)
    for p in sorted(pth() - before):    # start-up hooks of the new packages (numba-cuda's), as a new process runs them
        site.addpackage(str(p.parent), p.name, None)
    importlib.invalidate_caches()
    print(f"installed the course ({extra}) into {sys.executable}")
    moved = [f"{name} {v} -> {installed(name)}" for name, v in had.items() if installed(name) not in (v, None)]
    if moved:      # the host's own packages, moved to the course's pins or bounds: said, never silent
        print(f"pip replaced {', '.join(moved)} (the course's pins of CUDA's wheels, its bounds of the rest). A "
              "package of this Python that pinned an old version (pip's ERROR above names it, if any) now runs "
              "with the new one; reinstalling its pins brings the old one back, but then the course's SASS may "
              "differ from the chapters'", flush=True)
    stale = [f"{name} {v} -> {installed(name)}" for name, v in loaded.items() if installed(name) != v]
    if stale:
        message = (f"pip replaced {', '.join(stale)}, which this kernel had already imported: restart the kernel "
                   "(Colab: Runtime > Restart session) and run this cell again, so that the kernel and the grader "
                   "load the same versions")
        sys.meta_path.insert(0, _UntilRestart(message))
        raise RestartNeeded(message)


def installed(name: str) -> str | None:
    """The version of the distribution named `name` on disk now, or None."""
    try:
        return importlib.metadata.version(name)
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return None


def installed_distributions() -> dict[str, str]:
    """{name: version} of every distribution this Python has on disk."""
    out = {}
    for d in importlib.metadata.distributions():
        name = d.metadata["Name"] if d.metadata else None
        if name:
            out.setdefault(name, d.version)
    return out


def loaded_distributions() -> dict[str, str]:
    """The distributions whose packages this process has imported (Pillow for PIL), with their versions on disk: a
    module loaded before pip replaces it stays loaded, while a new process (the grader) loads the new one."""
    of = importlib.metadata.packages_distributions()
    names = {d for n in list(sys.modules) if "." not in n and not n.startswith("_") for d in of.get(n, [])}
    return {n: v for n in sorted(names) if (v := installed(n))}


if __name__ in ("__main__", "<run_path>"):   # run as a script, or by the setup cell through runpy.run_path
    install()
