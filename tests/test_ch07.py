"""Chapter 07 (persistent, clustered GEMM): tile orders (pure Python), every variant's SASS and resources
(CPU), each rung changing only the part its cell defines (CPU), and on a Hopper GPU every variant on ragged
and skinny shapes plus repeated runs compared bit for bit.

The kernel and the host helpers are read from the chapter's cells, so what is tested is what ships.
"""
import re
from pathlib import Path

import numpy as np
import pytest

import feedbeast as fb
from feedbeast import stress
from feedbeast.examples import matmul_inputs, matmul_reference
from feedbeast.course.notebook import load

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = load(ROOT / "chapters/07-capstone-gemm.ipynb")
SOLUTION = load(ROOT / "solutions/07-persistent-gemm.ipynb")


@pytest.fixture(scope="module")
def ch():
    """The chapter's definitions: the order helpers, VARIANTS, MODS (every variant compiled), build, prepare,
    run_check."""
    return CHAPTER.definitions("grouped_order", "hilbert_order", "panels_in_first_wave", "VARIANTS", "MODS",
                               "PART_CELLS", "TMA_STORE", "build", "prepare", "run_check")


def test_orders_are_permutations_and_grouped_walks_down_first(ch):
    for m_units, n_units in [(64, 32), (32, 32), (5, 7), (1, 32), (64, 1), (33, 17)]:
        every = sorted((i, j) for i in range(m_units) for j in range(n_units))
        for order in (ch["grouped_order"](m_units, n_units, 1), ch["grouped_order"](m_units, n_units, 16),
                      ch["hilbert_order"](m_units, n_units)):
            assert sorted(map(tuple, order)) == every
    o = ch["grouped_order"](64, 32, 16)
    assert [tuple(x) for x in o[:17]] == [(i, 0) for i in range(16)] + [(0, 1)]
    row = ch["grouped_order"](4, 3, 1)
    assert [tuple(x) for x in row[:4]] == [(0, 0), (0, 1), (0, 2), (1, 0)]


def test_hilbert_steps_are_neighbours_on_a_square():
    o = CHAPTER.definitions("hilbert_order")["hilbert_order"](32, 32)
    assert np.all(np.abs(np.diff(o, axis=0)).sum(axis=1) == 1)


def test_grouped_first_wave_touches_fewer_panels(ch):
    row = ch["panels_in_first_wave"](ch["grouped_order"](64, 32, 1))
    grp = ch["panels_in_first_wave"](ch["grouped_order"](64, 32, 16))
    assert sum(grp) < sum(row) and grp[1] < row[1]


SASS_CASES = ["rowmajor+direct", "grouped16+tma-store", "hilbert+tma-store", "cuda-barrier+tma-store",
              "inflight+tma-store", "cluster2+tma-store", "cluster2+mc/release", "cluster2+mc/relaxed",
              "cluster2+mc/relaxed+inflight"]


@pytest.mark.parametrize("name", SASS_CASES)
def test_variant_sass_and_no_spills(ch, name):
    v, mod = ch["VARIANTS"][name], ch["MODS"][name]
    want = ["UTMALDG", "HGMMA.64x256x16.F32.BF16", "USETMAXREG.DEALLOC", "USETMAXREG.TRY_ALLOC", "SYNCS"]
    forbid = []
    if v.get("LOADS") == "Multicast":
        want.append("UTMALDG.2D.MULTICAST")
    else:
        forbid.append("UTMALDG.2D.MULTICAST")
    if v.get("EPILOGUE") == "TmaStore":
        want.append("UTMASTG")
    else:
        forbid.append("UTMASTG")
    mod.expect_sass(*want, kernel="gemm_persistent", forbid=tuple(forbid))
    res = mod.resources["gemm_persistent"]
    assert res.spills == 0 and res.stack == 0, str(res)
    assert not mod.performance_losses, mod.performance_losses


def test_release_cluster_arrive_puts_a_gpu_fence_in_the_loop_and_relaxed_does_not(ch):
    """Chapters 07 and 10 name the four instructions `.release.cluster` puts in front of the arrive, in order."""
    fences = ["MEMBAR.ALL.CTA", "MEMBAR.ALL.GPU", "ERRBAR", "CGAERRBAR"]

    def fences_before_remote_arrives(mod):
        ops = [l.split(";")[0].split("*/")[-1].split() for l in mod.sass("gemm_persistent").splitlines() if "*/" in l]
        ops = [o[0] for o in ops if o]
        return sum(1 for i, o in enumerate(ops) if o.startswith("SYNCS.ARRIVE.TRANS64.RED")
                   and ops[max(0, i - 4):i] == fences)
    assert fences_before_remote_arrives(ch["MODS"]["cluster2+mc/release"]) == 2
    assert fences_before_remote_arrives(ch["MODS"]["cluster2+mc/relaxed"]) == 0
    assert "CCTL.IVALL" in ch["MODS"]["cluster2+mc/relaxed+acquire"].histogram("gemm_persistent")


def test_inflight_keeps_one_wgmma_batch_running(ch):
    assert "WARPGROUP.DEPBAR.LE gsb0, 0x1" in ch["MODS"]["inflight+tma-store"].sass("gemm_persistent")


def test_cuda_barrier_ring_refuses_clusters(ch):
    with pytest.raises(fb.CompileError, match="CLUSTER 1 only"):
        ch["build"](dict(ch["TMA_STORE"], LOADS="Cluster2", CUDA_BARRIER=1))


def test_rung_1_chooses_its_ablations_in_cpp_not_with_preprocessor_branches():
    """Its only #ifndef blocks give a -D its default; MMA_INFLIGHT is an if constexpr, CUDA_BARRIER picks the Ring."""
    src = CHAPTER.cuda("capstone").source
    defaults = re.findall(r"^#ifndef (\w+)\n#define (\w+) [^\n]+\n#endif$", src, re.M)
    assert len(defaults) == src.count("#ifndef") == 7 and all(a == b for a, b in defaults)
    assert not re.search(r"^\s*#\s*(if|ifdef|elif|else)\b", src, re.M)
    assert src.count("if constexpr (MMA_INFLIGHT)") == 2
    assert "using Ring = cuda::std::conditional_t<CUDA_BARRIER, BarrierRing<Tile, Loads>, ParityRing>;" in src


def test_only_the_cuda_barrier_variant_is_one_the_hazard_checker_cannot_model(ch):
    """The cuda::barrier ring is a cell of its own that build() adds for CUDA_BARRIER=1 only: the checker refuses a
    launch whose source names cuda::barrier (hazards.unmodeled, as hazards.run calls it), the other variants not."""
    from feedbeast import hazards as hz
    ring = CHAPTER.cuda("barrier_ring")
    assert ring.compile().kernel_names == [] and ch["PART_CELLS"]["BarrierRing"].source == ring.source
    for name, v in ch["VARIANTS"].items():
        mod = ch["MODS"][name]
        assert mod.source.count(ring.source) == int(v.get("CUDA_BARRIER", 0)), name
        assert ("cuda::barrier" in hz.unmodeled(mod.source, mod.defines)) == bool(v.get("CUDA_BARRIER")), name
    # without that cell, CUDA_BARRIER=1 does not compile: the ring comes from it alone
    mod = ch["MODS"]["cuda-barrier+tma-store"]
    with pytest.raises(fb.CompileError, match="BarrierRing"):
        fb.compile(mod.source.replace(ring.source, ""), "sm_90a", defines=mod.defines, name="capstone.cu")


# rung: its cell (--name), the part that cell defines, the variant measured as it, the previous rung's variant
LADDER = [("tma_store", "TmaStore", "grouped16+tma-store", "grouped16+direct"),
          ("hilbert", "Table", "hilbert+tma-store", "grouped16+tma-store"),
          ("cluster2", "Cluster2", "cluster2+tma-store", "grouped16+tma-store"),
          ("multicast", "Multicast", "cluster2+mc/relaxed", "cluster2+tma-store")]
PART_KEYS = ("EPILOGUE", "ORDER", "LOADS")      # the -D of rung 1's cell that name a part


def test_rung_1_is_the_whole_kernel_and_names_the_parts_it_is_built_from():
    rung1 = CHAPTER.cuda("capstone")
    assert rung1.compile().kernel_names == ["gemm_persistent"]
    for key in PART_KEYS:
        assert re.search(rf"#define {key} \w+", rung1.source), key


@pytest.mark.parametrize("cell, part, variant, previous", LADDER)
def test_each_rung_changes_only_the_part_its_cell_defines(ch, cell, part, variant, previous):
    v, prev = ch["VARIANTS"][variant], ch["VARIANTS"][previous]
    # its -D differ from the previous rung's only by naming the new part (rung 2 also drops a ring stage)
    changed = {k for k in v.keys() | prev.keys() if v.get(k) != prev.get(k)}
    key = next(k for k in PART_KEYS if v.get(k) == part)
    assert changed == {key} | ({"STAGES"} if part == "TmaStore" else set())
    # its cell compiles on its own, defines that part and no kernel, and is the only cell defining it
    rung = CHAPTER.cuda(cell)
    assert rung.compile().kernel_names == []
    assert [n for n, c in CHAPTER.cuda_cells.items() if re.search(rf"\bstruct {part}\b", c.source)] == [cell]
    assert ch["PART_CELLS"][part].source == rung.source

    # the module is the cells of its parts, then rung 1's, and nothing else; against the previous rung's
    # module, only this cell came in (and the cell of the part it replaces went)
    def cells(x):
        return [ch["PART_CELLS"][x[k]].source for k in PART_KEYS if k in x]
    assert ch["MODS"][variant].source == "\n".join(cells(v) + [CHAPTER.cuda("capstone").source])
    replaced = [ch["PART_CELLS"][prev[key]].source] if key in prev else []
    assert [c for c in cells(v) if c != rung.source] == [c for c in cells(prev) if c not in replaced]
    # without this cell, rung 1's does not compile: the part comes from it alone
    with pytest.raises(fb.CompileError, match=part):
        fb.compile("\n".join([c for c in cells(v) if c != rung.source] + [CHAPTER.cuda("capstone").source]),
                   "sm_90a", defines={k: str(x) for k, x in v.items()}, name="capstone.cu")


def test_lab_solution_sass():
    mod = SOLUTION.compile("lab")
    mod.expect_sass("UTMALDG", "UTMASTG", "HGMMA.64x128x16.F32.BF16", "USETMAXREG", kernel="gemm_persistent_lab")
    assert mod.resources["gemm_persistent_lab"].spills == 0


# ---- on a Hopper GPU ------------------------------------------------------------------------------------

ALL = ["rowmajor+direct", "grouped8+direct", "grouped16+direct", "grouped16+tma-store", "hilbert+tma-store",
       "cuda-barrier+tma-store", "inflight+tma-store", "cluster2+tma-store", "cluster2+mc/release",
       "cluster2+mc/relaxed", "cluster2+mc/relaxed+acquire", "cluster2+mc/release+inflight",
       "cluster2+mc/relaxed+inflight"]


def test_the_gpu_lists_name_every_variant(ch):
    assert sorted(ALL) == sorted(ch["VARIANTS"])


@pytest.mark.parametrize("m, n, k", [(4000, 4104, 3992), (264, 264, 72), (1000, 1032, 1000),
                                     (128, 8192, 4096), (8192, 256, 1024)])
def test_gpu_every_variant_ragged_and_skinny(gpu90, ch, m, n, k):
    for result in ch["run_check"](ALL, m, n, k, seed=m + n + k):
        assert result, result


@pytest.mark.parametrize("name", ALL)
def test_gpu_100_runs_bitwise_identical(gpu90, ch, name):
    # 16-byte row strides (bf16: multiples of 8) and no tensor smaller than its TMA box (fb.tensor_map's rules)
    for m, n, k in stress.sizes((392, 520, 200), multiple_of=(128, 256, 64), align=(1, 8, 8), at_least=(128, 256, 64)):
        a, b = matmul_inputs(m, n, k, fb.bfloat16, seed=5)
        c, launch = ch["prepare"](name, fb.to_device(a), fb.to_device(np.ascontiguousarray(b.T)), m, n, k)

        def once():
            c.poison()
            launch()
            return c
        first = stress.repeat_identical(once, n=100)
        fb.check(first, matmul_reference(a, b), name=f"{name} {m}x{n}x{k}")
