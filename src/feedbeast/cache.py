"""Where build products are kept on disk: compiled cubins (feedbeast.compile) and their disassemblies
(feedbeast.sass), under FEEDBEAST_CACHE (default ~/.cache/feedbeast).

Chapter 00 compiles its first kernel through this cache; chapter 03 reads SASS from it. A cache that cannot be
made or written (a read-only home, FEEDBEAST_CACHE naming a file) only costs the time: cached_file gives None, and
store writes nothing.
"""
from __future__ import annotations

import os
from pathlib import Path


KINDS = ("cubin", "sass")


def cache_dir(kind: str = "cubin") -> Path:
    """The folder of one kind of cached build product ("cubin", "sass") under FEEDBEAST_CACHE."""
    if kind not in KINDS:     # a folder of its own under the cache, never a path elsewhere ("../..")
        raise ValueError(f"cache_dir({kind!r}): the cache keeps {' and '.join(KINDS)} only")
    d = Path(os.environ.get("FEEDBEAST_CACHE", Path.home() / ".cache" / "feedbeast")) / kind
    d.mkdir(parents=True, exist_ok=True)
    return d


def cached_file(name: str, kind: str = "cubin") -> Path | None:
    """The path of a cached product, or None where the cache's folder cannot be made."""
    try:
        return cache_dir(kind) / name
    except OSError:
        return None


def store(path: Path | None, data: bytes) -> None:
    """Write a cached product whole, then rename it into place, so that a process reading it in parallel (make
    sanitize --jobs) never sees half a file; nothing where the cache cannot be written."""
    if path is None:
        return
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        tmp.replace(path)
    except OSError:
        try:
            tmp.unlink(missing_ok=True)      # a half-written file, where one could be made
        except OSError:
            pass
