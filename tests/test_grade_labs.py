"""The grader rejects wrong kernels in every lab: learner bugs planted into the solutions of labs 01 to 07
must not pass grading (lab 00 is covered by test_grade.py; lab 08 needs a Blackwell GPU).

Each bug is a list of (old, new) replacements, each of which must match exactly once in the solution's code
cells. What grading can see depends on the machine:

- Labs 01 and 02 run in Numba's simulator without a GPU, so a bug that gives wrong sums fails there too.
- Labs 03 to 07 compile and check their SASS without a GPU, but launches are skipped. A bug that only a
  launch reveals must then be reported as skipped, never as passed; one that shows in the SASS (a missing
  cp.async.wait_group, a missing setmaxnreg.dec, a missing fence.proxy.async) fails there.
- On a GPU of the lab's architecture every bug must fail grading, and the failure must say what went wrong:
  a wrong result (the check's FAILED line, CheckFailed), a missing instruction (SassMismatch), or a hang.

The correctness checks of labs 04-07 launch a debug build (Module.debug_build()), so a deadlocked barrier
wait raises BarrierTimeout naming the barrier after a bounded wait. A hang that is not a barrier wait would
spin until the grader's cell timeout (HANG_TIMEOUT for the bugs that can hang), and the report then says
"a cell ran past ... (a hung kernel?)".

Each variant is graded once per session; the variants the selected tests need are graded a few at a time.
Set FEEDBEAST_GRADE_REPORTS=<folder> to write every report as <folder>/<lab>-<bug>.txt
(the exact messages, for the instructor guide).
"""
from __future__ import annotations

import concurrent.futures
import os
import re
import threading
from pathlib import Path

import nbformat
import pytest

from feedbeast import grade as g

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 300          # seconds per cell
HANG_TIMEOUT = 120     # for bugs expected to deadlock: the check cell of a correct kernel takes seconds

# What a failure on the GPU may look like (matched against "name: message" of each failed outcome).
#   wrong: the check's own FAILED line (its name starts with the lab's check name) or CheckFailed
#   sass:  a SASS check said no
#   hang:  the grader's cell timeout on a kernel that never finished (or BarrierTimeout in a debug build)
#   fault: the launch died (KernelFault: an illegal address, a trap)
WRONG, SASS, HANG, FAULT = "wrong", "sass", "hang", "fault"

# lab -> (solution notebook, the name its correctness checks start with, the arch its launches need)
LABS = {
    "01": ("01-tiled-rowsum.ipynb", "rowsum_tiled", None),
    "02": ("02-double-buffered-rowsum.ipynb", "rowsum_db", None),
    "03": ("03-cp-async-rowsum.ipynb", "ring3_rowsum", None),
    "04": ("04-mbarrier-ring.ipynb", "rowsum_lab", "sm_90a"),
    "05": ("05-tma-ring.ipynb", "rowsum_lab", "sm_90a"),
    "06": ("06-warp-specialized-gemm.ipynb", "gemm_ws_lab", "sm_90a"),
    "07": ("07-persistent-gemm.ipynb", "gemm_lab", "sm_90a"),
}


class Bug:
    def __init__(self, replacements, gpu, cpu=None, hangs=False):
        self.replacements = replacements   # [(old, new)], each old exactly once in the solution's code cells
        self.gpu = set(gpu)                # failure kinds acceptable on the lab's GPU
        self.cpu = cpu                     # None: no launch without a GPU, must be skipped; else a regex that
        #                                    a failed outcome matches without a GPU
        self.hangs = hangs                 # may deadlock on a GPU: graded with HANG_TIMEOUT


NUMBA_WRONG = r"FAILED|AssertionError"     # the simulator ran it: a FAILED check line and the cell's assert

BUGS = {
    "01": {
        # The store guard is off by one: the band's last row is never written (the output is NaN-poisoned).
        "store-guard-off-by-one": Bug([("if lane == 0 and r0 + w < rows:", "if lane == 0 and r0 + w < rows - 1:")],
                                      gpu={WRONG}, cpu=NUMBA_WRONG),
        # Only whole tiles: the ragged last tile of each row (and all of a row narrower than a tile) is dropped.
        "last-tile-dropped": Bug([("for c0 in range(0, cols, TW):", "for c0 in range(0, cols // TW * TW, TW):")],
                                 gpu={WRONG}, cpu=NUMBA_WRONG),
    },
    "02": {
        # Wrong buffer index: the prefetched tile goes into the buffer being read (cur, not 1 - cur), so the
        # other buffer is never filled and the next iteration adds stale data.
        "stores-into-current-buffer": Bug([("tile[1 - cur, f // TW, f % TW] = regs[j]",
                                            "tile[cur, f // TW, f % TW] = regs[j]")],
                                          gpu={WRONG}, cpu=NUMBA_WRONG),
        # Off by one tile: the prefetch loads tile t again instead of t + 1 (tile 0 counted twice, the last
        # tile never). Invisible on a one-tile row (5 x 100); the 37 x 1000 / 16384 x 8192 check catches it.
        "prefetches-the-same-tile": Bug([("cur, c1 = t % 2, (t + 1) * TW", "cur, c1 = t % 2, t * TW")],
                                        gpu={WRONG}, cpu=NUMBA_WRONG),
    },
    "03": {
        # Missing cp.async.wait_group: tile t is summed before it has landed. The SASS check (no DEPBAR)
        # catches it without a GPU; on a GPU the correctness check usually fails first.
        "missing-wait": Bug([("fb::cp_async_wait<STAGES - 2>();", "")],
                            gpu={WRONG, SASS}, cpu=r"AssertionError.*DEPBAR|SassMismatch.*DEPBAR"),
        # Off-by-one bound: the chunk that starts exactly at the end of the row is copied (16 bytes of the
        # next row are added to this row's sum) instead of zero-filled.
        # (For the last row those 16 bytes lie past the end of x: inside the allocation's last page, so
        # expected to read garbage rather than fault; a fault would be a rejection too.)
        "bound-off-by-one": Bug([("const bool in = c < cols;", "const bool in = c <= cols;")], gpu={WRONG, FAULT}),
        # Wrong stage index: tile t is read from the stage just being refilled (nt % STAGES), which holds
        # tile t - 1 or, once the refill lands, tile t + 2: never tile t.
        "reads-the-refill-stage": Bug([("ring + (t % STAGES) * TILE", "ring + (nt % STAGES) * TILE")], gpu={WRONG}),
    },
    "04": {
        # One arrival per warp (lane 0) where empty[s] expects one per consumer thread: the phase never
        # completes, and the producer's bounded wait on 'empty' gives up.
        "arrive-once-per-warp": Bug([("    fb::mbar::arrive(&ring.empty[s]);\n",
                                      "    if (lane == 0) fb::mbar::arrive(&ring.empty[s]);\n")],
                                    gpu={HANG}, hangs=True),
        # Consumers wait on full[s] for the opposite parity: on the first lap a fresh barrier reports it
        # complete, so they sum stages before the bytes land (then the laps are out of step). On the H200
        # the launch failed (CUDA_ERROR_LAUNCH_FAILED), which is a rejection too.
        "full-parity-flipped": Bug([('fb::mbar::wait(&ring.full[s], phase, "full", s);',
                                     'fb::mbar::wait(&ring.full[s], phase ^ 1, "full", s);')],
                                   gpu={WRONG, HANG, FAULT}, hangs=True),
        # A plain arrive where the bytes must be announced: the phase completes before the copy lands. The
        # SASS check sees no arrive with transaction bytes, without a GPU too.
        "missing-expect-tx": Bug([("fb::mbar::arrive_expect_tx(&ring.full[s], bytes);",
                                   "fb::mbar::arrive(&ring.full[s]);")],
                                 gpu={WRONG, HANG, FAULT, SASS}, cpu=r"no arrive with transaction bytes", hangs=True),
        # No proxy fence between the consumers' reads and the release: the next bulk copy may overwrite bytes
        # still being read. The sums are usually right (memcheck's slower timing exposed 1 to 5 wrong rows in
        # lab 05's ring), so the SASS check is what rejects it, without a GPU too.
        "missing-proxy-fence": Bug([("    fb::fence_proxy_async();\n", "")],
                                   gpu={SASS, WRONG}, cpu=r"no proxy fence"),
    },
    "05": {
        # Coordinates outermost first (row, column) instead of innermost first: the wrong boxes are summed.
        "swapped-coordinates": Bug([("x_map, k * BC, blockIdx.x * BR, &full[s]",
                                     "x_map, blockIdx.x * BR, k * BC, &full[s]")], gpu={WRONG}),
        # Wrong parity: the producer waits on empty[s] from the first round, for the parity of the current
        # use. Parity 0 of a fresh barrier is the consumers' first release, which needs the box this wait
        # holds back: a deadlock at k = 0.
        "empty-parity-of-current-use": Bug(
            [('if (k >= STAGES) fb::mbar::wait(&empty[s], (k / STAGES - 1) % 2, "empty", s);',
              'fb::mbar::wait(&empty[s], (k / STAGES) % 2, "empty", s);')], gpu={HANG}, hangs=True),
        # Wrong expect_tx byte count: elements, not bytes (BR * BC instead of BR * BC * 4). The 16 KB the
        # TMA delivers overshoot the 4 KB announced, so the transaction count does not return to zero where
        # it should: expected to hang (the first GPU shape has 64 steps per row band), else wrong sums or a
        # trapped launch. Reasoned from the PTX rules, not observed.
        "expect-tx-in-elements": Bug([("fb::mbar::arrive_expect_tx(&full[s], BR * BC * 4);",
                                       "fb::mbar::arrive_expect_tx(&full[s], BR * BC);")],
                                     gpu={HANG, WRONG, FAULT}, hangs=True),
        # The given fence in consume deleted (see lab 04's missing-proxy-fence): rejected by the SASS check.
        "missing-proxy-fence": Bug([("    fb::fence_proxy_async();   // these reads, before the next TMA write "
                                     "into the stage\n", "")],
                                   gpu={SASS, WRONG}, cpu=r"SassMismatch.*no fence\.proxy\.async"),
    },
    "06": {
        # Wrong parity: the producer waits for ((kt / STAGES) & 1) without the ^ 1, i.e. for the consumers'
        # first release of a stage that was never filled: a deadlock at kt = 0.
        "producer-parity": Bug([("((kt / STAGES) & 1) ^ 1", "(kt / STAGES) & 1")], gpu={HANG}, hangs=True),
        # Wrong index: the consumer's rows from its warpgroup number (1, 2) instead of its consumer number
        # (0, 1): rows 0-63 of every tile are never written, rows 64-127 get the other consumer's values.
        "store-rows-by-warpgroup": Bug([("64 * c, blockIdx.x * BN)", "64 * wg, blockIdx.x * BN)")], gpu={WRONG}),
        # The producer warpgroup never gives its registers back: no USETMAXREG.DEALLOC in the SASS (seen
        # without a GPU). On a GPU the consumers' setmaxnreg.inc can never be granted: expected to hang in
        # the correctness check, before the SASS cell runs (reasoned, not observed; a trap would also do).
        "missing-release-registers": Bug([("fb::setmaxnreg_dec<40>();", "")],
                                         gpu={HANG, SASS, FAULT}, cpu=r"SassMismatch.*USETMAXREG\.DEALLOC",
                                         hangs=True),
    },
    "07": {
        # Grouped order dividing by GROUP_M where the last band has fewer m-tiles: tiles past M are
        # computed, tiles in later n columns never (264 x 264 and 128 x 8192 are left partly unwritten).
        "grouped-order-full-band": Bug([("return {first + in % rows, in / rows};",
                                         "return {first + in % GROUP_M, in / GROUP_M};")], gpu={WRONG}),
        # The accumulator is overwritten only on the block's first tile (ring position it, not the tile's
        # k-step kt): every later tile of a persistent block adds onto the previous one (4000 x 4104 x 3992
        # has about four tiles per block).
        "accumulates-across-tiles": Bug([("kt > 0 || kk > 0", "it > 0 || kk > 0")], gpu={WRONG}),
        # No fence between the epilogue's st.shared and the TMA store that reads the tile: the store may copy
        # stale bytes. Rejected by the SASS check, without a GPU too.
        "missing-epilogue-fence": Bug([("  fb::fence_proxy_async();                 // generic-proxy writes "
                                        "before async-proxy reads\n", "")],
                                      gpu={SASS, WRONG}, cpu=r"SassMismatch.*no fence\.proxy\.async"),
    },
}

CASES = [(lab, bug) for lab in BUGS for bug in BUGS[lab]]
GPU_LABS = {"01", "02", "03"}            # anygpu
HOPPER_LABS = {"04", "05", "06", "07"}   # gpu90


def _needs(lab):
    """None when this machine can launch the lab's kernels, else why not."""
    import feedbeast as fb
    arch = LABS[lab][2]
    return fb.needs(arch) if arch else fb.needs_gpu()


def _code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def planted(tmp: Path, lab: str, bug: str | None) -> Path:
    nb = nbformat.read(ROOT / "solutions" / LABS[lab][0], as_version=4)
    for old, new in (BUGS[lab][bug].replacements if bug else []):
        hits = [c for c in _code_cells(nb) if old in c.source]
        count = sum(c.source.count(old) for c in hits)
        assert count == 1, (f"lab {lab} bug {bug}: {old!r} occurs {count} times in the solution's code cells "
                            "(should be once): the solution changed, update BUGS in tests/test_grade_labs.py")
        hits[0].source = hits[0].source.replace(old, new)
    path = tmp / f"{lab}-{bug or 'solution'}.ipynb"
    nbformat.write(nb, path)
    return path


class _Grader:
    """Grades (lab, bug) variants once per session; without a GPU, the selected ones in parallel."""

    def __init__(self, tmp: Path, wanted):
        self.tmp = tmp
        self.dump = os.environ.get("FEEDBEAST_GRADE_REPORTS")
        self.lock = threading.Lock()
        self.futures: dict = {}
        # A hang in a debug build ends in BarrierTimeout after seconds, so gradings may share the GPU.
        workers = max(1, min(4, os.cpu_count() or 1))
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers)
        for key in wanted:
            self._submit(key)

    def _grade(self, lab, bug):
        path = planted(self.tmp, lab, bug)
        hangs = bug is not None and BUGS[lab][bug].hangs
        rep = g.grade(path, timeout=HANG_TIMEOUT if hangs else TIMEOUT)
        if self.dump:
            Path(self.dump).mkdir(parents=True, exist_ok=True)
            (Path(self.dump) / f"{lab}-{bug or 'solution'}.txt").write_text(str(rep) + "\n")
        return rep

    def _submit(self, key):
        with self.lock:
            if key not in self.futures:
                self.futures[key] = self.pool.submit(self._grade, *key)
            return self.futures[key]

    def __call__(self, lab, bug=None):
        return self._submit((lab, bug)).result()


@pytest.fixture(scope="module")
def graded(request, tmp_path_factory):
    """graded(lab, bug=None) -> the Report; grades what the selected tests of this module need, once."""
    import feedbeast as fb
    missing = {"gpu90": fb.needs("sm_90a") is not None, "anygpu": fb.needs_gpu() is not None}
    wanted = []
    for item in request.session.items:
        if getattr(item, "module", None) is not request.module or not hasattr(item, "callspec") \
                or "graded" not in item.fixturenames or any(missing.get(f) for f in item.fixturenames):
            continue
        p = item.callspec.params
        if "lab" in p:
            key = (p["lab"], p.get("bug"))
            if key not in wanted:
                wanted.append(key)
    grader = _Grader(tmp_path_factory.mktemp("grade_labs"), wanted)
    yield grader
    grader.pool.shutdown(wait=True, cancel_futures=True)


def _failures(rep) -> list[str]:
    return [f"{o.name}: {o.message}" for o in rep.failed]


def _is_check(name: str, lab: str) -> bool:
    prefix = LABS[lab][1]
    return name.startswith(prefix) or name.startswith("launch " + prefix)


def _kinds(rep, lab) -> set:
    """Which kinds of failure the report shows."""
    kinds = set()
    for o in rep.failed:
        text = f"{o.name}: {o.message}"
        if (_is_check(o.name, lab) and not o.name.startswith("launch ")) or "CheckFailed" in text \
                or re.search(r"AssertionError: .*(wrong|not yet correct)", text):
            kinds.add(WRONG)
        if o.name == "SASS" or "SassMismatch" in text or re.search(r"AssertionError: .*SASS|should contain", text):
            kinds.add(SASS)
        if "hung kernel" in text or "BarrierTimeout" in text:
            kinds.add(HANG)
        if "KernelFault" in text or "CUDA_ERROR" in text or "the Python kernel died" in text:
            kinds.add(FAULT)
    return kinds


# ---- the table itself (no grading) ----------------------------------------------------------------------

@pytest.mark.parametrize("lab,bug", CASES)
def test_each_replacement_matches_the_solution_once(tmp_path, lab, bug):
    planted(tmp_path, lab, bug)


# ---- the untouched solutions --------------------------------------------------------------------------

@pytest.mark.parametrize("lab", list(BUGS))
def test_untouched_solution_passes_grading(graded, lab):
    rep = graded(lab)
    assert rep.ok, str(rep)
    assert rep.passed, str(rep)
    if _needs(lab) is not None and lab not in ("01", "02"):
        # No launch: the correctness checks are skipped (named), none of them passed.
        assert any(_is_check(o.name, lab) for o in rep.skipped), str(rep)
        assert not any(_is_check(o.name, lab) for o in rep.passed), str(rep)
    else:
        # Numba's simulator or a GPU ran the kernel: the correctness checks passed.
        assert any(_is_check(o.name, lab) for o in rep.passed), str(rep)


# ---- without the lab's GPU --------------------------------------------------------------------------------

@pytest.mark.parametrize("lab,bug", CASES)
def test_bug_is_not_passed_without_the_gpu(graded, lab, bug):
    if _needs(lab) is None:
        pytest.skip(f"this machine launches lab {lab}'s kernels: the GPU test covers this bug")
    spec = BUGS[lab][bug]
    rep = graded(lab, bug)
    assert not rep.ok or not any(_is_check(o.name, lab) for o in rep.passed), str(rep)
    if spec.cpu is not None:
        # Visible without a launch (Numba's simulator, or the SASS): grading fails, and says why.
        assert not rep.ok and rep.failed, str(rep)
        assert any(re.search(spec.cpu, f, re.S) for f in _failures(rep)), str(rep)
    else:
        # Only a launch can reveal it: reported as skipped, never passed, and nothing else failed.
        assert not rep.failed, str(rep)
        assert not any(_is_check(o.name, lab) for o in rep.passed), \
            f"a correctness check cannot pass with no launch:\n{rep}"
        assert any(_is_check(o.name, lab) for o in rep.skipped), str(rep)


# ---- on the lab's GPU ----------------------------------------------------------------------------------

def _fails_on_gpu(rep, lab, bug):
    assert not rep.ok, str(rep)
    got = _kinds(rep, lab)
    assert got & BUGS[lab][bug].gpu, (f"expected a failure of kind {sorted(BUGS[lab][bug].gpu)}, "
                                      f"got {sorted(got) or 'none recognised'}:\n{rep}")


@pytest.mark.parametrize("lab,bug", [c for c in CASES if c[0] in GPU_LABS])
def test_bug_fails_grading_on_a_gpu(graded, lab, bug, anygpu):
    _fails_on_gpu(graded(lab, bug), lab, bug)


@pytest.mark.parametrize("lab,bug", [c for c in CASES if c[0] in HOPPER_LABS])
def test_bug_fails_grading_on_hopper(graded, lab, bug, gpu90):
    _fails_on_gpu(graded(lab, bug), lab, bug)
