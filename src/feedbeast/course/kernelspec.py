"""The notebooks' kernel, "Feeding the Beast": one definition for `make install`, `make lab`, the workshop hub and
its container image.

The kernel imports the course's hooks (FEEDBEAST_HOOKS: results, verdicts, recorded outputs) and loads the toolkit's
IPython extension at start, so `%%cuda` is there in every cell, also in the first one run after a restart. It loads it
as `feedbeast.magic` (the same magics), so that a notebook's own `%load_ext feedbeast` still loads quietly: IPython
notes "already loaded" for an extension name it has seen.

`python -m feedbeast.course.kernelspec` writes it into this Python's environment (share/jupyter/kernels/feedbeast,
never into a home folder).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

NAME, DISPLAY = "feedbeast", "Feeding the Beast"


def spec(python: str = sys.executable) -> dict:
    frozen = ["-Xfrozen_modules=off"] if sys.version_info >= (3, 11) else []   # as ipykernel writes it (debugger)
    return {"argv": [python, *frozen, "-m", "ipykernel_launcher", "-f", "{connection_file}", "--ext=feedbeast.magic"],
            "env": {"FEEDBEAST_HOOKS": "feedbeast.course"},
            "display_name": DISPLAY, "language": "python", "metadata": {"debugger": True}}


def write(folder, python: str = sys.executable) -> Path:
    """The kernel's folder `folder` (…/kernels/feedbeast), with its kernel.json."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "kernel.json").write_text(json.dumps(spec(python), indent=1) + "\n")
    return folder


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv:                                        # --help, or anything else: say what it does, write nothing
        if argv[0] in ("-h", "--help"):
            print(__doc__)
            return 0
        print(f"unknown argument {argv[0]!r}: python -m feedbeast.course.kernelspec takes none\n{__doc__}",
              file=sys.stderr)
        return 2
    import importlib.util
    if importlib.util.find_spec("ipykernel") is None:   # the kernel it writes would die at start
        import shlex
        print(f"the kernel runs ipykernel, which this Python lacks: {shlex.quote(sys.executable)} -m pip install "
              "ipykernel installs it (the checkout's requirements/base.txt holds the course's version); then run this "
              "again", file=sys.stderr)
        return 1
    try:
        folder = write(Path(sys.prefix) / "share" / "jupyter" / "kernels" / NAME)
    except OSError as e:      # a system Python's prefix, run as a user who may not write there
        print(f"the kernel {DISPLAY!r} could not be written: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    import shlex
    # in this Python's prefix: a Jupyter run from another Python looks elsewhere, and is told where it is
    print(f"kernel {DISPLAY!r} ({NAME}) in {folder}: a Jupyter run from this Python lists it; for a Jupyter of another "
          f"Python: jupyter kernelspec install --user {shlex.quote(str(folder))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
