"""Where build products are kept on disk: compiled cubins (feedbeast.compile) and their disassemblies
(feedbeast.sass), under FEEDBEAST_CACHE (default ~/.cache/feedbeast).

Chapter 00 compiles its first kernel through this cache; chapter 03 reads SASS from it.
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
