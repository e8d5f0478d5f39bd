"""The SASS reader gives the same instructions, operands by role and checks whichever nvdisasm wrote the JSON.

tests/data/nvdisasm/ holds `nvdisasm -json` of the same cubins as printed by several nvdisasm versions (recorded
with tests/data/nvdisasm/record.py: 13.0 is the one CUDA 13.0 images carry, 13.2 the pinned wheel). They order
some operands differently (13.0 writes LDGSTS's global source and predicate before its shared destination, and
13.5 adds commas), so nothing may read an operand by its place.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from feedbeast import sass

DATA = Path(__file__).parent / "data" / "nvdisasm"
RECORDED = {json.load(gzip.open(p))["version"]: json.load(gzip.open(p)) for p in sorted(DATA.glob("*.json.gz"))}
CASES = sorted(next(iter(RECORDED.values()))["cases"])


def parsed(version, case):
    return sass.from_nvdisasm_json(RECORDED[version]["cases"][case])


def test_at_least_two_versions_are_recorded_with_the_pinned_one():
    assert len(RECORDED) >= 2 and "13.0.85" in RECORDED
    pinned = next(ln.split("==")[1] for ln in (DATA.parents[2] / "requirements/base.txt").read_text().splitlines()
                  if ln.startswith("nvidia-cuda-nvdisasm=="))
    assert pinned in RECORDED, f"record the pinned nvdisasm {pinned}: python tests/data/nvdisasm/record.py {DATA}"


def test_the_recorded_documents_really_differ():
    """Otherwise the tests below would prove nothing about operand order."""
    raw = {v: json.dumps(d["cases"]["ch03_gemm_sm_80_s3"]) for v, d in RECORDED.items()}
    assert len(set(raw.values())) >= 2


@pytest.mark.parametrize("case", CASES)
def test_every_version_reads_as_the_same_instructions(case):
    reference, *others = sorted(RECORDED)
    want = parsed(reference, case)
    assert others and want and all(want.values()), (case, sorted(RECORDED))   # something to compare
    for v in others:
        got = parsed(v, case)
        assert list(got) == list(want), (v, case)
        for fn in want:
            assert [(i.offset, i.opcode, i.predicate, i.operands) for i in got[fn]] == \
                   [(i.offset, i.opcode, i.predicate, i.operands) for i in want[fn]], (v, case, fn)


@pytest.mark.parametrize("version", sorted(RECORDED))
def test_cp_async_operands_by_role(version):
    for case, kernel in (("cp_async_sm_90a", "stage"), ("ch03_gemm_sm_80_s3", "gemm_bf16"),
                         ("lab03_sm_90a_s3", "ring_logsumexp")):
        copies = [i for i in parsed(version, case)[kernel] if i.opcode.startswith("LDGSTS")]
        assert copies, (version, case)
        for c in copies:
            assert c.shared_address and not sass.is_global_address(c.shared_address), c
            assert c.global_address and sass.is_global_address(c.global_address), c
            assert c.operands[:2] == (c.shared_address, c.global_address), c   # cuobjdump's order
        # the zero-fill (ignore-source) predicate of a bounded copy
        assert any(c.predicate_operands for c in copies), (version, case)


@pytest.mark.parametrize("version", sorted(RECORDED))
def test_the_graders_sass_checks_read_the_same_everywhere(version):
    gemm = parsed(version, "ch03_gemm_sm_80_s3")["gemm_bf16"]
    assert set(sass.cp_async_waits(gemm)) == {1}                 # STAGES=3: wait_group 1
    ring = parsed(version, "ch03_ring_sm_90a_s4")["ring_rowsum"]
    assert set(sass.cp_async_waits(ring)) == {3}                 # STAGES=4
    lab04 = parsed(version, "lab04_sm_90a")["gemv_ring"]
    assert sass.proxy_fences(lab04) >= 1 and sass.proxy_fence_order(lab04) == []
    text = "\n".join(map(str, gemm))
    assert sass.opcodes(text) == [i.opcode for i in gemm]


@pytest.mark.parametrize("operand, role", [
    ("[R7]", "shared"), ("[UR8+0x400]", "shared"), ("desc[UR4][R2.64]", "global"), ("[R18.64]", "global"),
    ("P0", "predicate"), ("!P3", "predicate"), ("PT", "predicate"), ("R5", "register"), ("0x1", "register"),
])
def test_operand_roles(operand, role):
    got = ("predicate" if sass.is_predicate(operand) else
           ("global" if sass.is_global_address(operand) else "shared") if sass.is_address(operand) else "register")
    assert got == role
