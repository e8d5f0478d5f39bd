"""Record `nvdisasm -json` of a few course kernels, so the SASS parser is tested on more than one nvdisasm.

    python tests/data/nvdisasm/record.py OUT_DIR [--nvdisasm PATH]

writes OUT_DIR/nvdisasm-<version>.json.gz: {"version": ..., "cases": {case: the raw -json document}}.
The kernels are compiled here with NVRTC (no GPU needed); only the disassembler differs between recordings.
"""
from __future__ import annotations

import argparse
import gzip
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests"))


def cases() -> dict:
    """case -> cubin bytes."""
    import feedbeast as fb
    from feedbeast.course.notebook import load
    from test_compile import CP_ASYNC
    ch03 = load(ROOT / "chapters/03-cp-async.ipynb")
    lab03 = load(ROOT / "solutions/03-cp-async-rowsum.ipynb")
    lab04 = load(ROOT / "solutions/04-mbarrier-ring.ipynb")
    return {
        "cp_async_sm_90a": fb.compile(CP_ASYNC, "sm_90a").cubin,
        "ch03_gemm_sm_80_s3": ch03.compile("gemm", "sm_80", STAGES=3).cubin,
        "ch03_ring_sm_90a_s4": ch03.compile("ring", "sm_90a", STAGES=4).cubin,
        "lab03_sm_90a_s3": lab03.compile("lab", "sm_90a", STAGES=3).cubin,
        "lab04_sm_90a": lab04.compile("lab", "sm_90a").cubin,
    }


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--nvdisasm", default=None)
    args = ap.parse_args(argv)
    from feedbeast.sass import tool
    nvdisasm = args.nvdisasm or tool("nvdisasm")
    banner = subprocess.run([nvdisasm, "--version"], capture_output=True, text=True).stdout
    version = re.search(r"V(\d+\.\d+\.\d+)", banner).group(1)
    doc = {"version": version, "cases": {}}
    for name, cubin in cases().items():
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(cubin)
            f.flush()
            doc["cases"][name] = json.loads(subprocess.run([nvdisasm, "-json", f.name], check=True,
                                                           capture_output=True, text=True).stdout)
    out = Path(args.out) / f"nvdisasm-{version}.json.gz"
    out.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(out, "wt") as f:
        json.dump(doc, f)
    print(f"{out}: {len(doc['cases'])} cases, nvdisasm {version}")


if __name__ == "__main__":
    main()
