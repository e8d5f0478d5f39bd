"""What a notebook cell shows of the toolkit: a run of identical `skipped` lines as one line with its count.

Chapter 07 run without a GPU shows it: each of its launch loops prints one folded skip line.

A loop that launches one kernel at 13 sizes on a machine without the GPU it needs prints the same skip 13
times; in a notebook (an IPython kernel) the cell shows it once, as `skipped: launch k: needs sm_90a, this
machine has none  (×13)`. Only lines that hold `skipped` are folded, and only where they follow each other
inside one cell; every other line is printed as it comes. A line is held until the next different line or the
end of the cell, so the count is known when it is printed.

`import feedbeast` installs it in a running IPython kernel (`install`); outside IPython nothing changes.
"""
from __future__ import annotations

import sys
import threading

MARK = "skipped"


class FoldingStream:
    """A text stream that passes everything to `inner` except runs of identical lines holding MARK, which it
    writes once with their count. `end_cell()` writes what it holds."""

    def __init__(self, inner):
        self._inner = inner
        self._partial = ""        # text after the last newline, not yet written
        self._held = None         # a complete line holding MARK, not yet written
        self._count = 0
        self._lock = threading.RLock()

    def write(self, text: str) -> int:
        with self._lock:
            self._partial += text
            if "\n" in self._partial:
                *lines, self._partial = self._partial.split("\n")
                for line in lines:
                    self._line(line)
            if self._held is None and self._partial and MARK not in self._partial and len(self._partial) > 4096:
                self._inner.write(self._partial)   # a long line in progress: nothing to fold there
                self._partial = ""
        return len(text)

    def _line(self, line: str):
        if self._held is not None and line == self._held:
            self._count += 1
            return
        self._release()
        if MARK in line:
            self._held, self._count = line, 1
        else:
            self._inner.write(line + "\n")

    def _release(self):
        if self._held is not None:
            self._inner.write(self._held + (f"  (×{self._count})" if self._count > 1 else "") + "\n")
            self._held, self._count = None, 0

    def end_cell(self, *_):
        with self._lock:
            self._release()
            if self._partial:
                self._inner.write(self._partial)
                self._partial = ""
        self._inner.flush()

    def flush(self):
        with self._lock:
            if self._partial and self._held is None and MARK not in self._partial:
                self._inner.write(self._partial)   # print(..., end="", flush=True): show it now
                self._partial = ""
        self._inner.flush()

    def __getattr__(self, name):   # everything else (set_parent, fileno, encoding...) is the kernel stream's
        return getattr(self._inner, name)


def install(ip=None) -> FoldingStream | None:
    """Fold repeated skip lines in the IPython kernel running this process (once); None outside IPython."""
    if ip is None:
        try:
            from IPython import get_ipython
        except ImportError:
            return None
        ip = get_ipython()
    if ip is None or type(ip).__name__ == "TerminalInteractiveShell":
        return None
    if isinstance(sys.stdout, FoldingStream):
        return sys.stdout
    stream = FoldingStream(sys.stdout)
    sys.stdout = stream
    ip.events.register("post_run_cell", stream.end_cell)
    import atexit
    atexit.register(stream.end_cell)   # a shell that exits in the middle of a cell still shows what was held
    # A plot, a display or a traceback in the middle of a cell comes after the lines printed before it: write
    # what the stream holds first (the kernel flushes sys.stdout there, but a flush must not end a fold).
    for owner, name in ((ip, "showtraceback"), (ip, "showsyntaxerror"), (getattr(ip, "display_pub", None), "publish"),
                        (getattr(ip, "display_pub", None), "clear_output")):
        if owner is not None and callable(getattr(owner, name, None)):
            setattr(owner, name, _after_release(stream, getattr(owner, name)))
    return stream


def _after_release(stream: FoldingStream, fn):
    def call(*args, **kwargs):
        stream.end_cell()
        return fn(*args, **kwargs)
    call.__wrapped__ = fn
    return call
