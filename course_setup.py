"""Installs the course into the running Python when it is missing there (the setup cell of every notebook runs it).

In the course's environment (`make lab`, `make test`) it does nothing. Opened elsewhere (a hosted notebook, another
Jupyter, an editor) it installs from FEEDBEAST_SRC (a folder, wheel or URL that pip accepts) or else from the checkout
it stands in, with the CUDA wheels that match the driver: cu13 for a CUDA 13 driver (R580+) or none, else cu12.
Standard library only: it runs before the course is importable. `python course_setup.py` does the same.
"""
import ctypes
import importlib
import importlib.util
import os
import pathlib
import site
import subprocess
import sys


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


def install() -> None:
    if importlib.util.find_spec("feedbeast") is not None:
        return
    extra = cuda_extra()
    dirs = [*site.getsitepackages(), site.getusersitepackages()]
    pth = lambda: {p for d in dirs for p in pathlib.Path(d).glob("*.pth")}
    before = pth()
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", f"feedbeast[{extra}] @ {source()}"])
    for p in sorted(pth() - before):    # start-up hooks of the new packages (numba-cuda's), as a new process runs them
        site.addpackage(str(p.parent), p.name, None)
    importlib.invalidate_caches()
    print(f"installed the course ({extra}) into {sys.executable}")


if __name__ in ("__main__", "<run_path>"):   # run as a script, or by the setup cell through runpy.run_path
    install()
