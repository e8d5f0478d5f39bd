"""The labs are exercises, and the grader rejects wrong kernels in every one of them.

1. **Exercises.** A lab asks for a kernel its chapter does not print (the chapter's mechanism on another
   problem or shape): no solution shares more than MAX_SHARED non-trivial CUDA lines with its chapter.
2. **Planted bugs.** Learner bugs planted into the solutions of labs 01 to 07 must not pass grading (lab 00
   is covered by test_grade.py, lab 09 by test_ch09.py, lab 10 by test_lab10_grading.py; lab 08 needs a Blackwell
   GPU, so only its untouched solution is graded).

Each bug is a list of (old, new) replacements, each of which must match exactly once in the solution's code
cells. The grader runs the planted notebook's cells before `## Check` and the solution's own check cells.
What grading can see depends on the machine:

- Labs 01 and 02 run in Numba's simulator without a GPU, so a bug that gives wrong sums fails there too.
- Lab 07's `raster` is read back through a probe kernel, whose PTX runs on the host without a GPU
  (feedbeast.host_ptx): a bug in it fails there too.
- Labs 03 to 07 compile and check their SASS without a GPU, but launches are skipped. A bug that only a
  launch reveals must then be reported as skipped, never as passed; one that shows in the SASS (a missing
  cp.async.wait_group, a missing setmaxnreg.dec, a missing fence.proxy.async, a ring with one mbarrier wait where
  it needs two, a consumer release arrive left out) fails there.
- On a GPU of the lab's architecture every bug must fail grading, and the failure must say what went wrong:
  a wrong result (the check's FAILED line, CheckFailed), a missing instruction (SassMismatch), a hang, or a
  rule of the hazard checker (the grader runs labs 03-08 with FEEDBEAST_HAZARDS=1: each launch also runs
  the hazard build and raises HazardFound naming the rule). The races of the async proxy (a stage released
  before the wgmma that read it retired, a proxy fence after the release instead of before it, a TMA-store
  staging buffer rewritten before the store read it) usually give right numbers: grading must name the rule.
  A proxy fence moved after the release arrive is also visible in the SASS (fb.sass.expect_proxy_fence checks
  the fence's place), so it fails on any machine; a cp.async wait count one too large likewise.

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

import pytest

from feedbeast.course import grade as g
from feedbeast.course import notebook as nbm

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 300          # seconds per cell
HANG_TIMEOUT = 60      # for bugs expected to deadlock: a correct lab's check cell took at most 16 s on an H100

# What a failure on the GPU may look like (matched against "name: message" of each failed outcome).
#   wrong:  the check's own FAILED line (its name starts with the lab's check name) or CheckFailed
#   sass:   a SASS check said no
#   hang:   the grader's cell timeout on a kernel that never finished (or BarrierTimeout in a debug build)
#   fault:  the launch died (KernelFault: an illegal address, a trap)
#   hazard: the hazard build of a launch broke a rule of the async proxy (HazardFound, the rule named)
WRONG, SASS, HANG, FAULT, HAZARD, COMPILE = "wrong", "sass", "hang", "fault", "hazard", "compile"
HAZARD_RULES = ("async-read-in-flight", "missing-proxy-fence", "unordered-access", "expect-tx-mismatch",
                "arrival-count", "wait-parity", "barrier-uninitialized", "async-read-at-exit", "mbarrier-scope",
                "missing-wgmma-fence", "bulk-store-in-flight", "wgmma-register-in-flight", "peer-access-at-exit",
                "missing-tensormap-fence")

# lab -> (solution notebook, the name its correctness checks start with, the arch its launches need)
LABS = {
    "01": ("01-tiled-transpose.ipynb", "transpose_tiled", None),
    "02": ("02-double-buffered-transpose.ipynb", "transpose_db", None),
    "03": ("03-cp-async-rowsum.ipynb", "ring_logsumexp", None),
    "04": ("04-mbarrier-ring.ipynb", "gemv_ring", "sm_90a"),
    "05": ("05-tma-ring.ipynb", "transpose_ring", "sm_90a"),
    "06": ("06-warp-specialized-gemm.ipynb", "gemm_bias_relu_ws", "sm_90a"),
    "07": ("07-persistent-gemm.ipynb", "gemm_persistent_lab", "sm_90a"),
    "08": ("08-tmem-mma.ipynb", "gemm_bias_relu", "sm_100a"),
}

# lab -> its chapter, for the overlap measure
CHAPTERS = {"03": "03-cp-async.ipynb", "04": "04-mbarrier.ipynb", "05": "05-tma.ipynb",
            "06": "06-warp-specialization.ipynb", "07": "07-capstone-gemm.ipynb", "08": "08-blackwell.ipynb"}
MAX_SHARED = 20


# lab 03's per-tile wait, as the solution writes it (two planted bugs move it)
LAB03_WAIT = "      fb::cp_async_wait<STAGES - 2>();                      // my copy of tile j has landed\n"

class Bug:
    def __init__(self, replacements, gpu, cpu=None, hangs=False, rule=None, cpu_may_fail=None, says=None):
        self.replacements = replacements   # [(old, new)], each old exactly once in the solution's code cells
        self.gpu = set(gpu)                # failure kinds acceptable on the lab's GPU
        self.cpu = cpu                     # None: no launch without a GPU, must be skipped; else a regex that
        #                                    a failed outcome matches without a GPU
        self.hangs = hangs                 # may deadlock on a GPU: graded with HANG_TIMEOUT
        self.rule = rule                   # a race: on a GPU the failure must name this hazard rule
        self.says = says                   # or: on a GPU a failure must match this regex (the rule in words)
        self.cpu_may_fail = cpu_may_fail   # with cpu None: a SASS check may also see it (a regex its failure
        #                                    must match), e.g. a proxy fence in the wrong place


NUMBA_WRONG = r"FAILED|AssertionError|CheckFailed"   # the simulator ran it: a FAILED check, the cell raising
FENCE_SASS = r"SassMismatch.*(fence\.proxy\.async|FENCE\.VIEW\.ASYNC)|proxy fence"
FENCE_PLACE = r"missing-proxy-fence|fence\.proxy\.async\S* in the wrong place"   # the hazard rule, or the SASS order
WAITS_SASS = r"SassMismatch.*1 mbarrier wait\(s\).*expected at least 2"
OVERRUN = r"bytes after the last element were written"   # fb.check's words for a store into an output's guard
RASTER = r"raster order, \d+ x \d+ tiles"          # the probe of raster() alone, run on the host without a GPU

BUGS = {
    "01": {
        # The barrier between the two halves left out: a thread writes out elements that other warps have not yet
        # copied into the tile (the simulator runs the warps apart, as a GPU does).
        "missing-barrier": Bug([("    cuda.syncthreads()\n    for j in range(TILE // BAND):\n        i = w + j * BAND\n"
                                 "        if c0 + i < cols", "    for j in range(TILE // BAND):\n        i = w + j * BAND\n"
                                 "        if c0 + i < cols")], gpu={WRONG},
                               cpu=r"CheckFailed: kernel transpose_tiled has no cuda.syncthreads\(\)"),
        # Python the simulator runs and Numba's GPU compiler rejects (a list): without a GPU the check hands the
        # kernel to the real compiler in a process of its own; on a GPU the launch fails to compile.
        "python-list-in-the-kernel": Bug([("            tile[i, lane] = x[r0 + i, c0 + lane]\n",
                                           "            vals = []\n            vals.append(x[r0 + i, c0 + lane])\n"
                                           "            tile[i, lane] = vals[0]\n")],
                                         gpu={COMPILE}, cpu=r"CheckFailed: kernel transpose_tiled: Numba's GPU compiler "
                                                          r"rejects it at `vals.append\(x\[r0 \+ i, c0 \+ lane\]\)`"),
        # The barrier inside the read's guard: only the threads with an element in the matrix reach it. Numba's
        # simulator runs it as if it were right; the barrier check reads it in the source, on any machine.
        "barrier-inside-the-guard": Bug([("            tile[i, lane] = x[r0 + i, c0 + lane]\n    cuda.syncthreads()\n",
                                          "            tile[i, lane] = x[r0 + i, c0 + lane]\n            cuda.syncthreads()\n")],
                                        gpu={WRONG}, cpu=r"CheckFailed: kernel transpose_tiled: a barrier that not every "
                                                         r"thread of the block reaches: line \d+: cuda.syncthreads\(\) "
                                                         r"under line \d+: if r0 \+ i < rows"),
        # The tile written out as it was read (tile[i, lane], not tile[lane, i]): each 32 x 32 block of y holds the
        # block of x untransposed.
        "tile-not-transposed": Bug([("y[c0 + i, r0 + lane] = tile[lane, i]", "y[c0 + i, r0 + lane] = tile[i, lane]")],
                                   gpu={WRONG}, cpu=NUMBA_WRONG),
        # The write's row guard one too far (<= rows): where rows is not a multiple of 32 (1000 x 37), the last row of
        # y gets a store one element past its end. The simulator's numpy raises IndexError; on a GPU Numba checks no
        # bounds, and the check sees the store in the poisoned guard after y (it is given y itself, not a copy).
        "store-past-the-end": Bug([("        if c0 + i < cols and r0 + lane < rows:\n            y[c0 + i, r0 + lane]",
                                    "        if c0 + i < cols and r0 + lane <= rows:\n            y[c0 + i, r0 + lane]")],
                                  gpu={WRONG}, cpu=r"IndexError", says=OVERRUN),
    },
    "02": {
        # Wrong buffer index: the prefetched tile goes into the buffer being written out (cur, not 1 - cur), so the
        # other buffer is never filled and the next iteration writes stale data.
        "stores-into-current-buffer": Bug([("tile[1 - cur, w + j * BAND, lane] = regs[j]",
                                            "tile[cur, w + j * BAND, lane] = regs[j]")],
                                          gpu={WRONG}, cpu=NUMBA_WRONG),
        # Off by one tile: the prefetch loads tile t again instead of t + 1 (each tile's successor is a copy of it).
        # Invisible on a one-tile strip (5 x 3); the 45 x 70 and 300 x 7 checks catch it.
        "prefetches-the-same-tile": Bug([("r0, rn = (t0 + t) * TILE, (t0 + t + 1) * TILE",
                                          "r0, rn = (t0 + t) * TILE, (t0 + t) * TILE")],
                                        gpu={WRONG}, cpu=NUMBA_WRONG),
        # Correct, but one buffer's design: a second barrier in the tile loop, before the stores into the other
        # buffer. The lab asks for two buffers and one barrier per tile; the check counts the loop's barriers.
        "two-barriers-per-tile": Bug([("        for j in range(PER):\n            tile[1 - cur, w + j * BAND, lane] = regs[j]\n",
                                       "        cuda.syncthreads()\n        for j in range(PER):\n"
                                       "            tile[1 - cur, w + j * BAND, lane] = regs[j]\n")],
                                     gpu={WRONG}, cpu=r"CheckFailed: kernel transpose_db: one pass of the loop at line \d+ can reach 2 "
                                                      r"barriers"),
        # The write's row guard one too far, as in lab 01: a store one element past the end of y's last row.
        "store-past-the-end": Bug([("            if c0 + i < cols and r0 + lane < rows:\n                y[c0 + i, r0 + lane]",
                                    "            if c0 + i < cols and r0 + lane <= rows:\n                y[c0 + i, r0 + lane]")],
                                  gpu={WRONG}, cpu=r"IndexError", says=OVERRUN),
    },
    "03": {
        # The fold's guard written for the tail alone (cols % TILE_F): a row of whole tiles (cols a multiple of
        # TILE_F) drops its last tile; only a check shape of whole tiles sees it.
        "fold-guard-cols-mod-tile": Bug([("      if (j * TILE_F + 4 * threadIdx.x < cols)",
                                          "      if (j < ntiles - 1 || 4 * threadIdx.x < cols % TILE_F)")], gpu={WRONG}),
        # Missing cp.async.wait_group: tile j is read before it has landed. The SASS check (no DEPBAR)
        # catches it without a GPU; on a GPU the correctness check usually fails first.
        "missing-wait": Bug([("      fb::cp_async_wait<STAGES - 2>();                      // my copy of tile j has landed\n",
                              "")], gpu={WRONG, SASS}, cpu=r"SassMismatch.*DEPBAR"),
        # Wait count one too large: tile j may still be in flight when it is read. The SASS check of the
        # wait count (DEPBAR.LE SB0, N with N <= STAGES - 2) rejects it on any machine.
        "wait-count-one-too-many": Bug([("fb::cp_async_wait<STAGES - 2>();", "fb::cp_async_wait<STAGES - 1>();")],
                                       gpu={SASS, WRONG}, cpu=r"SassMismatch.*(cp\.async|DEPBAR)"),
        # The wait moved after the fold: its count is right, and from the second tile on each read follows the last
        # iteration's wait; but tile 0 is read before it lands. The SASS shows the first read with no wait before it.
        "wait-after-the-fold": Bug([(LAB03_WAIT, ""),
                                    ("reinterpret_cast<const float4*>(slots + (j % STAGES) * TILE_F)[threadIdx.x]);\n",
                                     "reinterpret_cast<const float4*>(slots + (j % STAGES) * TILE_F)[threadIdx.x]);\n"
                                     "      fb::cp_async_wait<STAGES - 2>();\n")],
                                   gpu={SASS, WRONG}, cpu=r"SassMismatch.*the wait is in the wrong place: .*the first "
                                                          r"tile is read before it lands"),
        # One wait before the loop instead of one per tile: the loop commits and reads but never waits.
        "one-wait-before-the-loop": Bug([(LAB03_WAIT, ""),
                                         ("    for (int j = 0; j < ntiles; ++j) {\n      __syncthreads();",
                                          "    fb::cp_async_wait<STAGES - 2>();\n    for (int j = 0; j < ntiles; ++j) {\n"
                                          "      __syncthreads();")],
                                        gpu={SASS, WRONG}, cpu=r"SassMismatch.*the wait is in the wrong place: the loop "
                                                               r"at 0x[0-9a-f]+-0x[0-9a-f]+ commits cp.async groups"),
        # The wait inside a loop of its own that runs only for the first tile (a rolled loop the SASS keeps): every
        # later tile is read with no wait. The SASS shows a path through the ring's loop that skips the loop around
        # the wait and still reads.
        "wait-on-the-first-tile-only": Bug([(LAB03_WAIT, '      _Pragma("unroll 1") for (int q = 0; q < (j == 0 ? rows : 0); '
                                                         '++q) fb::cp_async_wait<STAGES - 2>();\n')],
                                           gpu={SASS, WRONG}, cpu=r"SassMismatch.*the wait is in the wrong place: a pass "
                                                                  r"of the loop .* can skip its wait"),
        # The zero-filled chunks past the end of a row are folded in as elements: exp(0 - m) is added to the
        # sum for each of them (every row whose width is not a multiple of the tile).
        "zeros-folded-in": Bug([("      if (j * TILE_F + 4 * threadIdx.x < cols)              // zero-filled chunks are not "
                                 "elements of the row\n", "")], gpu={WRONG}),
        # Stage off by one: tile j is read from the slot just being refilled (ahead % STAGES), which holds
        # tile j - 1 or, once the refill lands, tile j + 2: never tile j.
        # The hazard build, which records every shared-memory read, sees the read of a cp.async destination
        # before its wait (unordered-access) before the numbers come out wrong.
        "reads-the-refill-stage": Bug([("slots + (j % STAGES) * TILE_F", "slots + (ahead % STAGES) * TILE_F")],
                                      gpu={WRONG, HAZARD}),
    },
    "04": {
        # Wrong arrival count: one arrival per warp (lane 0) where empty[s] expects one per consumer thread:
        # the phase never completes, and the producer's bounded wait on 'empty' gives up.
        "arrive-once-per-warp": Bug([("      fb::mbar::arrive(&b.empty[s]);\n",
                                      "      if (lane == 0) fb::mbar::arrive(&b.empty[s]);\n")],
                                    gpu={HANG, HAZARD}, hangs=True),
        # Flipped parity: consumers wait on full[s] for the opposite parity. On the first lap a fresh barrier
        # reports it complete, so they multiply slots before the bytes land (then the laps are out of step).
        "full-parity-flipped": Bug([('fb::mbar::wait(&b.full[s], (it / STAGES) & 1, "full", s);',
                                     'fb::mbar::wait(&b.full[s], ((it / STAGES) & 1) ^ 1, "full", s);')],
                                   gpu={WRONG, HANG, FAULT, HAZARD}, hangs=True),
        # Wrong expect_tx: only the rows' bytes are announced, not x's segment. The phase can complete before
        # the last copy lands, and that copy's bytes then count against the next phase.
        "expect-tx-without-x": Bug([("bytes * (live + 1)", "bytes * live")],
                                   gpu={WRONG, HANG, FAULT, HAZARD}, hangs=True),
        # The producer never waits on empty[s]: it refills slots the consumers are still reading. The SASS has one
        # mbarrier wait loop where the ring needs two (fb.sass.expect_mbarrier_waits), so it fails on any machine.
        "producer-skips-empty-wait": Bug([('      fb::mbar::wait(&b.empty[s], ((it / STAGES) & 1) ^ 1, "empty", s);\n',
                                           "")], gpu={SASS}, cpu=WAITS_SASS),
        # The consumers never wait on full[s]: they read slots before the copies land. One wait loop, as above.
        "consumer-skips-full-wait": Bug([('      fb::mbar::wait(&b.full[s], (it / STAGES) & 1, "full", s);\n', "")],
                                        gpu={SASS}, cpu=WAITS_SASS),
        # No proxy fence between the consumers' reads and the release: rejected by the SASS check on any machine.
        "missing-proxy-fence": Bug([("      fb::fence_proxy_async();                     // my reads of slot s, before "
                                     "the next bulk copy\n", "")], gpu={SASS, HAZARD, WRONG}, cpu=FENCE_SASS),
        # A race of the async proxy: the fence comes after the release arrive, so nothing orders the
        # consumers' ordinary reads before the next bulk copy into the slot. The fence is still in the SASS.
        "fence-after-release": Bug([("      fb::fence_proxy_async();                     // my reads of slot s, before "
                                     "the next bulk copy\n      fb::mbar::arrive(&b.empty[s]);\n",
                                     "      fb::mbar::arrive(&b.empty[s]);\n      fb::fence_proxy_async();\n")],
                                   gpu={SASS, HAZARD}, cpu=FENCE_PLACE, says=FENCE_PLACE),
        # Count too low: empty[s] expects one warp's arrivals where every consumer thread arrives. Each phase
        # completes after the first 32 arrivals; the others land in later phases they knew nothing of.
        # A warp's arrivals that outnumber what the phase has pending are undefined (PTX ISA, mbarrier); the hazard
        # build arrives one lane at a time (fb::mbar::arrive), so its trace survives and names the rule.
        "empty-count-too-low": Bug([("fb::mbar::init(&b.empty[s], 32 * GROUP);", "fb::mbar::init(&b.empty[s], 32);")],
                                   gpu={HAZARD}, rule="arrival-count", hangs=True),
    },
    "05": {
        # Coordinates outermost first (row, column) instead of innermost first: the wrong boxes are moved.
        "swapped-coordinates": Bug([("xm, (t / row_boxes) * BOX_C, (t % row_boxes) * BOX_R, &bar.full[s]",
                                     "xm, (t % row_boxes) * BOX_R, (t / row_boxes) * BOX_C, &bar.full[s]")],
                                   gpu={WRONG, HAZARD}),
        # Flipped parity: the producer waits on empty[s] for the parity of the current use. Parity 0 of a fresh
        # barrier is the consumers' first release, which needs the box this wait holds back: a deadlock.
        "empty-parity-of-current-use": Bug([('fb::mbar::wait(&bar.empty[s], ((it / STAGES) & 1) ^ 1, "empty", s);',
                                             'fb::mbar::wait(&bar.empty[s], (it / STAGES) & 1, "empty", s);')],
                                           gpu={HANG}, hangs=True),
        # Wrong expect_tx: elements, not bytes. The phase's transaction count never returns to zero where it
        # should: a hang, wrong results or a trapped launch; the hazard build names the mismatch.
        "expect-tx-in-elements": Bug([("fb::mbar::arrive_expect_tx(&bar.full[s], BOX * 4);",
                                       "fb::mbar::arrive_expect_tx(&bar.full[s], BOX);")],
                                     gpu={HANG, WRONG, FAULT, HAZARD}, hangs=True),
        # The producer never waits on empty[s]: boxes land in stages the consumers are still transposing. The SASS
        # has one mbarrier wait loop where the ring needs two (fb.sass.expect_mbarrier_waits): rejected on any machine.
        "producer-skips-empty-wait": Bug([('    fb::mbar::wait(&bar.empty[s], ((it / STAGES) & 1) ^ 1, "empty", s);   '
                                           '// lap 0 passes at once\n', "")],
                                         gpu={SASS}, cpu=WAITS_SASS, hangs=True),
        # The consumers never wait on full[s]: they transpose boxes that have not landed. One wait loop, as above
        # (ptxas puts ten instructions between the try-wait left and its branch to the retry loop; the count must
        # still take the two try-waits for one wait).
        "consumer-skips-full-wait": Bug([('    fb::mbar::wait(&bar.full[s], (it / STAGES) & 1, "full", s);\n', "")],
                                        gpu={SASS}, cpu=WAITS_SASS, hangs=True),
        # The consumers never give a stage back (no arrive on empty[s]): the producer's second lap waits forever.
        # The SASS has no plain arrive (SYNCS.ARRIVE.TRANS64.A1T0): rejected on any machine.
        "consumers-skip-release": Bug([("  if (threadIdx.x % 32 == 0) fb::mbar::arrive(&bar.empty[s]);\n", "")],
                                      gpu={SASS}, cpu=r"SassMismatch.*missing SYNCS\.ARRIVE\.TRANS64\.A1T0", hangs=True),
        # No proxy fence in publish: rejected by the SASS check on any machine.
        "missing-proxy-fence": Bug([("  fb::fence_proxy_async();   // my reads of the stage and writes of the tile, "
                                     "before async accesses\n", "")], gpu={SASS, HAZARD, WRONG}, cpu=FENCE_SASS),
        # A race: the fence after the release arrive. The tile's store is still fenced, the stage's refill not.
        "fence-after-release": Bug([("  fb::fence_proxy_async();   // my reads of the stage and writes of the tile, "
                                     "before async accesses\n  __syncwarp();\n"
                                     "  if (threadIdx.x % 32 == 0) fb::mbar::arrive(&bar.empty[s]);\n",
                                     "  __syncwarp();\n  if (threadIdx.x % 32 == 0) fb::mbar::arrive(&bar.empty[s]);\n"
                                     "  fb::fence_proxy_async();\n")],
                                   gpu={SASS, HAZARD}, cpu=FENCE_PLACE, says=FENCE_PLACE),
        # The same, with a fence before the arrive that never runs (inline PTX, predicated on a row that is never
        # negative): ptxas branches over it, and a fence read in address order only would pass the SASS check.
        "fence-after-release-and-a-dead-fence": Bug(
            [("  fb::fence_proxy_async();   // my reads of the stage and writes of the tile, before async accesses\n"
              "  __syncwarp();\n  if (threadIdx.x % 32 == 0) fb::mbar::arrive(&bar.empty[s]);\n",
              '  asm volatile("{ .reg .pred p; setp.eq.s32 p, %0, -12345; @p fence.proxy.async.shared::cta; }" '
              ':: "r"(row0) : "memory");\n'
              "  __syncwarp();\n  if (threadIdx.x % 32 == 0) fb::mbar::arrive(&bar.empty[s]);\n"
              "  fb::fence_proxy_async();\n")],
            gpu={SASS, HAZARD}, cpu=FENCE_PLACE, says=FENCE_PLACE),
        # A race: the staging tile is rewritten without waiting until the store issued from it two boxes ago
        # has read it (the given cp.async.bulk.wait_group.read deleted).
        "staging-rewritten-before-store-read": Bug(
            [("    if (leader) fb::tma::wait_group_read<1>();     // the store issued from this tile two boxes ago "
              "has read it\n", "")], gpu={HAZARD}, rule="async-read-in-flight"),
        # A race: the block exits while its last TMA stores may still read the staging tile (the final
        # cp.async.bulk.wait_group deleted): the block's shared memory can be reused under them.
        "exits-while-store-reads": Bug(
            [("  if (leader) fb::tma::wait_group<0>();            // the last stores are complete before the block "
              "exits\n", "")], gpu={HAZARD}, rule="async-read-at-exit"),
        # A race: only lane 0 of each warp fences; the other lanes' reads of the stage and writes of the tile reach
        # the async proxy unfenced (fence.proxy.async orders the executing thread's accesses only).
        "fence-in-one-lane": Bug([("  fb::fence_proxy_async();   // my reads of the stage and writes of the tile, "
                                   "before async accesses\n",
                                   "  if (threadIdx.x % 32 == 0) fb::fence_proxy_async();\n")],
                                 gpu={HAZARD}, rule="missing-proxy-fence"),
        # Count too low: empty[s] expects 2 arrivals where 4 consumer warps arrive: each phase completes early.
        "empty-count-too-low": Bug([("fb::mbar::init(&bar.empty[s], 4);", "fb::mbar::init(&bar.empty[s], 2);")],
                                   gpu={HAZARD}, rule="arrival-count", hangs=True),
    },
    "06": {
        # Flipped parity: the producer waits for ((q / STAGES) & 1) without the ^ 1, i.e. for the consumers'
        # first release of a stage that was never filled: a deadlock at q = 0.
        "producer-parity": Bug([('((q / STAGES) & 1) ^ 1, "spent", slot)', '(q / STAGES) & 1, "spent", slot)')],
                               gpu={HANG}, hangs=True),
        # Wrong rows: the epilogue offsets by the warpgroup number (1, 2) instead of the consumer number
        # (0, 1): the tile's first 128 rows are never written, the next ones get the wrong values.
        "store-rows-by-role": Bug([("blockIdx.y * TILE_M + 128 * h,", "blockIdx.y * TILE_M + 128 * role,")],
                                  gpu={WRONG}),
        # Wrong arrival count: every consumer thread arrives where spent[s] expects one per warpgroup: the
        # phases run ahead and the producer refills stages that are still being read.
        "every-thread-arrives": Bug([("      if (threadIdx.x % 128 == 0) fb::mbar::arrive(&p.spent[slot]);\n",
                                      "      fb::mbar::arrive(&p.spent[slot]);\n")],
                                    gpu={WRONG, HANG, FAULT, HAZARD}, hangs=True),
        # The producer never waits on spent[s].
        "producer-skips-empty-wait": Bug([('    fb::mbar::wait(&p.spent[slot], ((q / STAGES) & 1) ^ 1, "spent", slot);   '
                                           '// lap 0 passes at once\n', "")],
                                         gpu={WRONG, HANG, FAULT, HAZARD}, hangs=True),
        # The producer warpgroup never gives its registers back: no USETMAXREG.DEALLOC in the SASS (seen
        # without a GPU). On a GPU the consumers' setmaxnreg.inc cannot be granted: a hang or the SASS check.
        "missing-setmaxnreg-dec": Bug([("    fb::setmaxnreg_dec<40>();                       // the whole warpgroup, "
                                        "before its one thread works\n", "")],
                                      gpu={HANG, SASS, FAULT}, cpu=r"SassMismatch.*(USETMAXREG\.DEALLOC|no \.dec)",
                                      hangs=True),
        # Counts that ask for more than the block's registers (40 + 2 x 240 = 520 > 3 x 168): the consumers' .inc
        # would wait forever. The SASS holds the counts: rejected before any launch, on any machine.
        "split-larger-than-the-pool": Bug([("fb::setmaxnreg_inc<232>", "fb::setmaxnreg_inc<240>")],
                                          gpu={SASS}, cpu=r"SassMismatch.*setmaxnreg asks for 1 x 40 \+ 2 x 240 = 520 "
                                                          r"registers per lane.*the block has 3 x 168 = 504"),
        # The same split with a second, dead .dec count beside it: the check takes each role at its largest count.
        "split-larger-than-the-pool-beside-a-dead-count": Bug(
            [("fb::setmaxnreg_inc<232>", "fb::setmaxnreg_inc<240>"),
             ("    fb::setmaxnreg_dec<40>();", "    if (K < 0) fb::setmaxnreg_dec<24>();\n    fb::setmaxnreg_dec<40>();")],
            gpu={SASS}, cpu=r"SassMismatch.*setmaxnreg asks for 1 x 40 \+ 2 x 240 = 520 registers per lane.*"
                            r"the largest of the \.dec counts 24, 40"),
        # The epilogue's row guard one too far (row > M): the tile past the last row writes row M, past the end of
        # D (the guard fb.empty puts after it); the rows inside are right.
        "row-guard-one-too-far": Bug([("if (row >= M || col >= N) continue;", "if (row > M || col >= N) continue;")],
                                     gpu={WRONG}),
        # bf16 by truncation (round toward zero) instead of rounding: twice the error of one rounding, which the
        # check's bound (bf16-rounded) separates.
        "truncated-to-bf16": Bug([("*reinterpret_cast<__nv_bfloat162*>(out) = __floats2bfloat162_rn(lo, hi);",
                                   "*reinterpret_cast<unsigned*>(out) = (__float_as_uint(lo) >> 16) | "
                                   "(__float_as_uint(hi) & 0xffff0000u);")], gpu={WRONG}),
        # An assert() in the kernel: a call, across which ptxas serialises every wgmma (C7510). The check names
        # the call as the cause, on any machine (ptxas's note is in the compile log).
        "assert-in-the-kernel": Bug([("  const int role = threadIdx.x / 128, nk = (K + TILE_K - 1) / TILE_K;\n",
                                      "  const int role = threadIdx.x / 128, nk = (K + TILE_K - 1) / TILE_K;\n"
                                      "  assert(nk > 0);\n")],
                                    gpu={WRONG, SASS}, cpu=r"CheckFailed: ptxas: \(C7510\).*function call.*a call in the "
                                                    r"kernel, such as assert\(\) or printf\(\), ends the wgmma pipeline"),
        # A race: the consumer releases the stage before wgmma.wait_group has retired the wgmma that read it.
        "release-before-wgmma-retired": Bug(
            [("      fb::wgmma::wait_group<0>();                   // this warpgroup's wgmma have read the stage\n"
              "      fb::wgmma::fence_operand(acc[0]);\n      fb::wgmma::fence_operand(acc[1]);\n"
              "      if (threadIdx.x % 128 == 0) fb::mbar::arrive(&p.spent[slot]);\n",
              "      if (threadIdx.x % 128 == 0) fb::mbar::arrive(&p.spent[slot]);\n"
              "      fb::wgmma::wait_group<0>();\n      fb::wgmma::fence_operand(acc[0]);\n"
              "      fb::wgmma::fence_operand(acc[1]);\n")], gpu={HAZARD}, rule="async-read-in-flight"),
    },
    "07": {
        # m fastest inside a band (the order chapter 07's M-grouped raster walks a band in): every tile once, so C is
        # right; only the raster's own check, tile by tile, sees the order the exercise asks for.
        "raster-m-fastest": Bug([("return {pos / width, n_first + pos % width};",
                                  "return {pos % m_tiles, n_first + pos / m_tiles};")], gpu={WRONG}, cpu=RASTER),
        # bf16 by truncation instead of rounding in the epilogue's staging: twice one rounding's error (the check's
        # bound is bf16-rounded).
        "truncated-to-bf16": Bug([("*reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(acc[i], acc[i + 1]);",
                                   "*reinterpret_cast<unsigned*>(p) = (__float_as_uint(acc[i]) >> 16) | "
                                   "(__float_as_uint(acc[i + 1]) & 0xffff0000u);")], gpu={WRONG}),
        # N-grouped order dividing by GROUP_N where the last band is narrower: tiles past N are computed,
        # some tiles inside N never (4104 = 32 full n-tiles + 8 columns: a last band one tile wide).
        "raster-full-band": Bug([("return {pos / width, n_first + pos % width};",
                                  "return {pos / GROUP_N, n_first + pos % GROUP_N};")], gpu={WRONG},
                                cpu=RASTER),
        # The accumulator is overwritten only on the block's first tile (ring position, not the tile's k-step):
        # every later tile of a persistent block adds onto the previous one.
        "accumulates-across-tiles": Bug([("ks > 0 || kk > 0", "pos > 0 || kk > 0")], gpu={WRONG}),
        # Stage off by one: the consumers read the stage after the one they waited for.
        "reads-the-next-stage": Bug([("const unsigned char* a = ring + slot * SLOT + half * 64 * 128;",
                                      "const unsigned char* a = ring + ((slot + 1) % STAGES) * SLOT + half * 64 * 128;")],
                                    gpu={WRONG, HAZARD}),
        # No fence between the epilogue's st.shared and the TMA store: rejected by the SASS check everywhere.
        "missing-epilogue-fence": Bug([("  fb::fence_proxy_async();                           // my st.shared, before "
                                        "the TMA store reads them\n", "")], gpu={SASS, HAZARD, WRONG}, cpu=FENCE_SASS),
        # A race: the staging panels are rewritten before the previous tile's TMA store has read them.
        "staging-rewritten-before-store-read": Bug([("  if (issuer) fb::tma::wait_group_read<0>();\n", "")],
                                                   gpu={HAZARD}, rule="async-read-in-flight"),
        # A race: the stage is released before wgmma.wait_group has retired the wgmma that read it.
        "release-before-wgmma-retired": Bug(
            [("        fb::wgmma::wait_group<0>();                  // the wgmma no longer read stage s\n"
              "        if (threadIdx.x % 128 == 0) fb::mbar::arrive(&rg.empty[slot]);\n",
              "        if (threadIdx.x % 128 == 0) fb::mbar::arrive(&rg.empty[slot]);\n"
              "        fb::wgmma::wait_group<0>();\n")], gpu={HAZARD}, rule="async-read-in-flight"),
        # A race: the persistent block exits while its last tile's TMA stores may still read the panels.
        "exits-while-store-reads": Bug([("    if (threadIdx.x % 128 == 0) fb::tma::wait_group<0>();   // the last "
                                         "stores have completed\n", "")], gpu={HAZARD}, rule="async-read-at-exit"),
        # A race: only the store's issuer fences; the other warps' st.shared of the panels are not fenced. The SASS
        # check sees a path from their STS to the UTMASTG without a fence (rejected everywhere); the hazard checker
        # names the rule where it runs.
        "epilogue-fence-by-issuer-only": Bug([("  fb::fence_proxy_async();                           // my st.shared, "
                                               "before the TMA store reads them\n",
                                               "  if (issuer) fb::fence_proxy_async();\n")],
                                             gpu={SASS, HAZARD}, rule="missing-proxy-fence", cpu=FENCE_SASS),
        # No wgmma.fence before the warpgroup's wgmma (PTX ISA requires one before the first): ptxas patches it in
        # (info C7519) and the results are right; the hazard checker names the broken contract.
        "missing-wgmma-fence": Bug([("        fb::wgmma::fence();\n", "")], gpu={HAZARD}, rule="missing-wgmma-fence"),
        # An accumulator read between the wgmma and the wait_group that retires it (undefined, PTX ISA:
        # wgmma.wait_group), the registers pinned there by fence_operand. The test never passes and the results stay
        # right: ptxas waits for the wgmma itself and says so (C7517), and the hazard check names the rule from its log.
        "reads-accumulator-in-flight": Bug([("        fb::wgmma::commit_group();\n",
                                             "        fb::wgmma::commit_group();\n"
                                             "        if (acc[0] > 3e38f) acc[1] = 0.f;\n"
                                             "        fb::wgmma::fence_operand(acc);\n")],
                                           gpu={HAZARD}, rule="wgmma-register-in-flight"),
        # stage_slab's loop left rolled: acc[i] with a run-time i puts the accumulator array on the stack (a stack
        # frame, no spills). The resources check says which it is and what to do, on any machine.
        "stage-slab-not-unrolled": Bug([("#pragma unroll\n  for (int i = 0; i < 64; i += 2) {",
                                         "#pragma unroll 1\n  for (int i = 0; i < 64; i += 2) {")], gpu={WRONG},
                                       cpu=r"CheckFailed: gemm_persistent_lab uses local memory: a \d+ B stack frame "
                                           r"and no spills: a local array .* unroll the loops that index it"),
    },
    "08": {},   # needs a Blackwell GPU: only the untouched solution is graded (partial elsewhere)
}

CASES = [(lab, bug) for lab in BUGS for bug in BUGS[lab]]
# Without a GPU, every bug that only a launch can reveal grades alike (compiled, SASS-checked, launches
# skipped: partial). One of them per lab is graded to show it; the others are left to the GPU tests.
CPU_SAMPLE = {lab: next((b for b, spec in bugs.items() if spec.cpu is None and spec.cpu_may_fail is None), None)
              for lab, bugs in BUGS.items()}


def _cpu_skip(lab, bug) -> str | None:
    spec = BUGS[lab][bug]
    if spec.cpu is None and spec.cpu_may_fail is None and bug != CPU_SAMPLE[lab]:
        return (f"without a GPU this bug grades like {CPU_SAMPLE[lab]!r} (launch-only: partial, never passed); "
                "the GPU test grades it")
    return None
GPU_LABS = {"01", "02", "03"}            # anygpu
HOPPER_LABS = {"04", "05", "06", "07"}   # gpu90


def _needs(lab):
    """None when this machine can launch the lab's kernels, else why not."""
    import feedbeast as fb
    arch = LABS[lab][2]
    return fb.needs(arch) if arch else fb.needs_gpu()


def planted(tmp: Path, lab: str, bug: str | None) -> Path:
    # Each replacement must match the solution's code cells once (else ValueError: update BUGS here).
    return nbm.planted(ROOT / "solutions" / LABS[lab][0], BUGS[lab][bug].replacements if bug else (),
                       to=tmp / f"{lab}-{bug or 'solution'}.ipynb")


# ---- the labs are exercises (no grading) ------------------------------------------------------------------

TRIVIAL = re.compile(r"^[{}();,\s]*(?:else)?[{}();,\s]*$")


def cuda_lines(path) -> set[str]:
    """The non-trivial lines of a notebook's %%cuda cells: comments and blank, brace-only and #pragma lines
    dropped, whitespace collapsed."""
    out = set()
    for cell in nbm.load(path).cuda_cells.values():
        for line in cell.source.splitlines():
            line = re.sub(r"\s+", " ", re.sub(r"//.*$", "", line)).strip()
            if line and not TRIVIAL.match(line) and not line.startswith("#pragma"):
                out.add(line)
    return out


def shared_with_chapter(lab: str) -> set[str]:
    return cuda_lines(ROOT / "solutions" / LABS[lab][0]) & cuda_lines(ROOT / "chapters" / CHAPTERS[lab])


@pytest.mark.parametrize("lab", sorted(CHAPTERS))
def test_the_lab_asks_for_a_kernel_its_chapter_does_not_print(lab):
    shared = shared_with_chapter(lab)
    assert len(shared) <= MAX_SHARED, (
        f"solution {lab} shares {len(shared)} CUDA lines with chapter {CHAPTERS[lab]} (at most {MAX_SHARED}): "
        "the lab should apply the chapter's mechanism to another problem or shape, not reprint it:\n  "
        + "\n  ".join(sorted(shared)))


NUMBA_CHAPTERS = {"01": "01-synchronous-loads.ipynb", "02": "02-software-pipelining.ipynb"}
MAX_SHARED_NUMBA = 8     # a kernel's frame (decorator, thread indices, shape, a barrier): the rowsum labs shared 26 and 21


def numba_lines(path) -> set[str]:
    """The non-trivial lines of a notebook's code cells that define Numba kernels (`@cuda.jit`): comments and blank
    and bracket-only lines dropped, whitespace collapsed."""
    out = set()
    for cell in nbm.load(path).cells:
        if cell.cell_type != "code" or "@cuda.jit" not in cell.source:
            continue
        for line in cell.source.splitlines():
            line = re.sub(r"\s+", " ", re.sub(r"#.*$", "", line)).strip()
            if line and not re.match(r"^[()\[\]:,\s]*$", line):
                out.add(line)
    return out


@pytest.mark.parametrize("lab", sorted(NUMBA_CHAPTERS))
def test_the_numba_lab_asks_for_a_kernel_its_chapter_does_not_print(lab):
    shared = numba_lines(ROOT / "solutions" / LABS[lab][0]) & numba_lines(ROOT / "chapters" / NUMBA_CHAPTERS[lab])
    assert len(shared) <= MAX_SHARED_NUMBA, (
        f"solution {lab} shares {len(shared)} lines of its Numba kernels with chapter {NUMBA_CHAPTERS[lab]} (at most "
        f"{MAX_SHARED_NUMBA}): the lab should apply the chapter's mechanism to another problem:\n  "
        + "\n  ".join(sorted(shared)))


def test_the_overlap_measure_sees_a_reprinted_kernel(tmp_path):
    """The measure can fail: a solution whose kernel cell is its chapter's (comments and spacing changed,
    solution markers added) shares far more than MAX_SHARED lines."""
    chapter = ROOT / "chapters" / CHAPTERS["08"]
    body = next(c for c in nbm.load(chapter).cuda_cells.values() if "__global__" in c.source).source
    body = re.sub(r"//.*$", "// a comment of my own", body, flags=re.M).replace("  ", " ")

    def reprint(nb):
        cell = next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith("%%cuda"))
        cell.source = "%%cuda --arch sm_100a --name lab\n// BEGIN SOLUTION\n" + body + "\n// END SOLUTION\n"
    copy = nbm.planted(ROOT / "solutions" / LABS["08"][0], edit=reprint, to=tmp_path / "08-reprinted.ipynb")
    assert len(cuda_lines(copy) & cuda_lines(chapter)) > 3 * MAX_SHARED


@pytest.mark.parametrize("lab,bug", CASES)
def test_each_replacement_matches_the_solution_once(tmp_path, lab, bug):
    planted(tmp_path, lab, bug)


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


def _tests_spread_one_by_one(config) -> bool:
    """Is this a pytest-xdist worker whose tests come one by one from a shared list (`-n N` alone: --dist load)?
    Each worker collects every test, so a worker that graded all of them ahead would grade what others run too
    (12 workers x 4 gradings at once: on an H200 server the out-of-memory killer stopped gradings)."""
    # tests/conftest.py puts the controller's resolved mode in workerinput
    return hasattr(config, "workerinput") and config.workerinput.get("dist", "load") not in ("loadfile", "loadscope")


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
        if item.originalname == "test_bug_is_not_passed_without_the_gpu" and p.get("bug") \
                and (_needs(p["lab"]) is None or _cpu_skip(p["lab"], p["bug"])):
            continue                  # that test skips: nothing to grade for it
        if "lab" in p:
            key = (p["lab"], p.get("bug"))
            if key not in wanted:
                wanted.append(key)
    if _tests_spread_one_by_one(request.config):
        wanted = []       # every worker holds every item: grade only what this worker's tests ask for
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
        if o.name == "SASS" or "SassMismatch" in text or re.search(r"AssertionError: .*SASS|should contain", text) \
                or o.name.startswith("proxy fence in the SASS"):
            kinds.add(SASS)
        if "hung kernel" in text or "BarrierTimeout" in text:
            kinds.add(HANG)
        if "KernelFault" in text or "CUDA_ERROR" in text or "the Python kernel died" in text:
            kinds.add(FAULT)
        if "HazardFound" in text or any(f"[{r}]" in text or f"{r}:" in text for r in HAZARD_RULES):
            kinds.add(HAZARD)
        if re.search(r"\b(TypingError|LoweringError)\b|Numba's GPU compiler rejects it", text):
            kinds.add(COMPILE)
    return kinds


# ---- the untouched solutions --------------------------------------------------------------------------

@pytest.mark.parametrize("lab", list(BUGS))
def test_untouched_solution_passes_grading(graded, lab):
    rep = graded(lab)
    assert not rep.failed and not rep.error, str(rep)
    assert rep.passed, str(rep)
    assert not [n for n in rep.notes if n.startswith("not run by the grader")], rep.notes   # nothing of its own
    if _needs(lab) is not None and lab not in ("01", "02"):
        # No launch: partial (exit 2). The correctness checks are skipped (named), none of them passed.
        assert rep.status == "partial", str(rep)
        assert any(_is_check(o.name, lab) for o in rep.skipped), str(rep)
        assert not any(_is_check(o.name, lab) for o in rep.passed), str(rep)
    else:
        # Numba's simulator or a GPU ran the kernel: the correctness checks passed.
        assert rep.status in ("ok", "partial"), str(rep)
        assert any(_is_check(o.name, lab) for o in rep.passed), str(rep)
        if lab not in ("01", "02"):
            assert rep.status == "ok", f"on a GPU of the lab's architecture every check runs:\n{rep}"


# ---- without the lab's GPU --------------------------------------------------------------------------------

@pytest.mark.parametrize("lab,bug", CASES)
def test_bug_is_not_passed_without_the_gpu(graded, lab, bug):
    if _needs(lab) is None:
        pytest.skip(f"this machine launches lab {lab}'s kernels: the GPU test covers this bug")
    if _cpu_skip(lab, bug):
        pytest.skip(_cpu_skip(lab, bug))
    spec = BUGS[lab][bug]
    rep = graded(lab, bug)
    assert not rep.ok, str(rep)
    if lab not in ("01", "02"):   # (labs 01 and 02 launch in Numba's simulator: a shape may pass there)
        assert not any(_is_check(o.name, lab) for o in rep.passed), \
            f"a correctness check cannot pass with no launch:\n{rep}"
    if spec.cpu is not None:
        # Visible without a launch (Numba's simulator, or the SASS): grading fails, and says why.
        assert rep.status == "failed" and rep.failed, str(rep)
        assert any(re.search(spec.cpu, f, re.S) for f in _failures(rep)), str(rep)
    elif spec.cpu_may_fail is not None and rep.failed:
        # A SASS check that sees the fence's place may reject it here already; then it must say so.
        assert all(re.search(spec.cpu_may_fail, f, re.S) for f in _failures(rep)), str(rep)
    else:
        # Only a launch can reveal it: reported as skipped (partial), never passed, and nothing else failed.
        assert not rep.failed and rep.status == "partial", str(rep)
        assert any(_is_check(o.name, lab) for o in rep.skipped), str(rep)


def test_a_cell_that_stops_after_its_failed_checks_counts_each_failure_once(graded):
    """Lab 01's check cell records a failed check per shape, then raises CheckFailed so that the notebook stops
    there: the raise is no further failure; its words go with the cell's first failed check."""
    rep = graded("01", "tile-not-transposed")
    assert rep.status == "failed" and not any(o.name.startswith("check cell") for o in rep.failed), str(rep)
    stopped = [o for o in rep.failed if "(the check cell then stopped: CheckFailed" in o.message]
    assert len(stopped) == 1 and "not yet correct: see the elements named above" in stopped[0].message, str(rep)


# ---- on the lab's GPU ----------------------------------------------------------------------------------

def _fails_on_gpu(rep, lab, bug):
    spec = BUGS[lab][bug]
    assert rep.status == "failed", str(rep)
    got = _kinds(rep, lab)
    assert got & spec.gpu, (f"expected a failure of kind {sorted(spec.gpu)}, "
                            f"got {sorted(got) or 'none recognised'}:\n{rep}")
    if spec.rule and HAZARD in got:
        assert any(spec.rule in f for f in _failures(rep)), \
            f"a race of the async proxy must be rejected naming the rule {spec.rule!r}:\n{rep}"
    if spec.says:
        assert any(re.search(spec.says, f, re.S) for f in _failures(rep)), \
            f"the rejection must say {spec.says!r}:\n{rep}"


@pytest.mark.parametrize("lab,bug", [c for c in CASES if c[0] in GPU_LABS])
def test_bug_fails_grading_on_a_gpu(graded, lab, bug, anygpu):
    _fails_on_gpu(graded(lab, bug), lab, bug)


@pytest.mark.parametrize("lab,bug", [c for c in CASES if c[0] in HOPPER_LABS])
def test_bug_fails_grading_on_hopper(graded, lab, bug, gpu90):
    _fails_on_gpu(graded(lab, bug), lab, bug)


# ---- the closing table, on a GPU: python tests/test_grade_labs.py --table [--budget S] [--racecheck] ----------
# Grades every planted bug of labs 03-07 and the untouched solutions (four at a time), reads from each report what
# the hazard checker said (the grader runs each launch's hazard build), and with --racecheck runs each planted
# race's notebook (its cells up to `## Measure`) under compute-sanitizer racecheck, as `make sanitize` would.
# Prints one Markdown row per variant; what did not finish within the budget is listed as not run.

RACES = {(lab, bug) for lab in BUGS for bug, spec in BUGS[lab].items()
         if spec.rule or spec.says not in (None, OVERRUN) or (HAZARD in spec.gpu and SASS in spec.gpu)}


def _hazard_column(rep) -> str:
    """What the hazard checker said during grading: the rules it named, or its clean checks."""
    rules = []
    for o in rep.failed:
        text = f"{o.name}: {o.message}"
        if "HazardFound" in text or o.name.startswith("hazard check"):
            rules += [r for r in HAZARD_RULES if f"[{r}]" in text or f"{r}:" in text][:1]
    clean = [o for o in rep.passed if o.name.startswith("hazard check")]
    skipped = [o for o in rep.skipped if o.name.startswith("hazard check")]
    if rules:
        return ", ".join(dict.fromkeys(rules)) + f" ({len(clean)} clean check(s) before)"
    if clean:
        out = f"0 violations in {len(clean)} check(s)"
    else:
        text = " ".join(f"{o.name}: {o.message}" for o in rep.failed)
        out = ("no trace: a launch hung (BarrierTimeout)" if "BarrierTimeout" in text or "hung kernel" in text
               else "no trace: a launch faulted" if "KernelFault" in text or "CUDA_ERROR" in text
               else "no check reached (an earlier check failed)" if rep.failed else "no check ran (no launch)")
    return out + (f", {len(skipped)} not checkable" if skipped else "")


def _verdict(lab, bug, rep) -> tuple[bool, str]:
    if bug is None:
        ok = rep.status == "ok" and not rep.failed
        return ok, f"{rep.status}, exit {rep.exit_code}"
    spec = BUGS[lab][bug]
    kinds = _kinds(rep, lab)
    fails = _failures(rep)
    ok = rep.status == "failed" and bool(kinds & spec.gpu)
    if spec.rule and HAZARD in kinds:       # as the test: the rule is asked for where the hazard check reported
        ok = ok and any(spec.rule in f for f in fails)
    if spec.says:
        ok = ok and any(re.search(spec.says, f, re.S) for f in fails)
    named = [r for r in HAZARD_RULES if any(r in f for f in fails)]
    first = next((f for f in fails), "")
    first = re.sub(r"\s+", " ", first)[:110].replace("|", "/")
    return ok, (f"{rep.status}, exit {rep.exit_code}; {'/'.join(sorted(kinds)) or 'no failure recognised'}"
                + (f"; names {', '.join(named)}" if named else "") + f" ({first})")


# Runs a notebook's code cells in this process as `make sanitize` does (feedbeast.course.sanitize.run), but goes on
# after a cell that raises, and lets a failed SASS check through (said in the log): racecheck must see the launches that
# a SASS check of the planted bug would otherwise stop.
_RACE_RUNNER = r"""
import os, sys
if sys.argv[2:3] != ["hazards"]:       # racecheck: as make sanitize runs it (its sizes, timing off)
    os.environ["FEEDBEAST_UNDER_SANITIZER"] = "1"
from IPython.core.interactiveshell import InteractiveShell
from feedbeast import sass as S
from feedbeast.course import sanitize
from feedbeast.compile import Module
from feedbeast.course.notebook import read

def _lenient(f):
    def g(*a, **k):
        try:
            return f(*a, **k)
        except Exception as e:
            print(f"racecheck run: SASS check not enforced: {type(e).__name__}: {str(e).splitlines()[0][:120]}", flush=True)
            return {}
    return g

S.expect_proxy_fence = _lenient(S.expect_proxy_fence)
Module.expect_sass = _lenient(Module.expect_sass)
path = os.path.abspath(sys.argv[1])
nb = read(path)
os.chdir(os.path.dirname(path))
shell = InteractiveShell.instance()
from feedbeast import hooks
hooks.mode.untimed, hooks.mode.unprofiled = sanitize.TIMED_OFF, "timing is off"   # as under make sanitize
for i, c in enumerate(x for x in nb.cells if x.cell_type == "code"):
    r = shell.run_cell(c.source, store_history=False)
    if not r.success:
        e = r.error_in_exec or r.error_before_exec
        print(f"racecheck run: code cell {i + 1} raised {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
              flush=True)
print("racecheck run: done", flush=True)
"""


def _until_measure(tmp: Path, lab: str, bug: str, tag: str) -> Path:
    def before_measure(nb):
        cut = next((i for i, c in enumerate(nb.cells) if c.cell_type == "markdown"
                    and c.source.lstrip().startswith("## Measure")), len(nb.cells))
        nb.cells = nb.cells[:cut]
    return nbm.planted(planted(tmp, lab, bug), edit=before_measure, to=tmp / f"{lab}-{bug}-{tag}.ipynb")


def _hazards_direct(tmp: Path, lab: str, bug: str, timeout: int) -> str:
    """The hazard checker alone on the planted notebook (cells before `## Measure`, every launch hazard-checked,
    FEEDBEAST_HAZARDS=report, a failed SASS check let through): the rules it names."""
    import subprocess
    import sys
    path = _until_measure(tmp, lab, bug, "hazards")
    env = dict(os.environ, FEEDBEAST_HAZARDS="report", MPLBACKEND="Agg")
    env.pop("FEEDBEAST_UNDER_SANITIZER", None)
    try:
        r = subprocess.run([sys.executable, "-c", _RACE_RUNNER, str(path), "hazards"], capture_output=True, text=True,
                           timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return f"not finished in {timeout} s"
    log = r.stdout + r.stderr
    (tmp / f"{lab}-{bug}-hazards.log").write_text(log)
    checks = [ln for ln in log.splitlines() if ln.startswith("hazard check: ")]
    bad = [ln for ln in checks if not re.search(r": 0 violation\(s\)", ln)]
    rules = list(dict.fromkeys(re.findall(r"^\[([a-z-]+)\] ", log, re.M)))
    out = (f"{', '.join(rules)} ({len(bad)} of {len(checks)} checks)" if rules
           else f"0 violations in {len(checks)} checks")
    if "racecheck run: done" not in log:
        out += f"; did not finish (exit {r.returncode})"
    return out


def _racecheck(tmp: Path, lab: str, bug: str, timeout: int) -> str:
    """The planted notebook's cells before `## Measure` under compute-sanitizer racecheck (as make sanitize)."""
    import subprocess
    import sys
    from feedbeast.course import sanitize
    san = sanitize.find_sanitizer()
    if san is None:
        return "not run: no compute-sanitizer"
    path = _until_measure(tmp, lab, bug, "racecheck")
    env = {k: v for k, v in os.environ.items() if k != "FEEDBEAST_HAZARDS"}
    env["MPLBACKEND"] = "Agg"
    cmd = [san, "--tool", "racecheck", "--racecheck-report", "all", "--print-limit", "100", "--report-api-errors",
           "no", "--target-processes", "application-only", sys.executable, "-c", _RACE_RUNNER, str(path)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return f"not finished in {timeout} s"
    log = r.stdout + r.stderr
    (tmp / f"{lab}-{bug}-racecheck.log").write_text(log)
    n = sanitize.count_reports(log, "racecheck")
    passed = len(re.findall(r": passed\b", log))
    failed = len(re.findall(r": FAILED\b", log))
    notes = [ln[len("racecheck run: "):] for ln in log.splitlines()
             if ln.startswith("racecheck run: ") and not ln.endswith(": done")]
    if "racecheck run: done" not in log:
        notes.append(f"did not finish (exit {r.returncode})")
    return (f"{'no summary' if n is None else f'{n} hazards'}; results {passed} right, {failed} wrong"
            + "".join(f"; {x[:80]}" for x in notes[:2])).replace("|", "/")


def _table(argv) -> int:
    import argparse
    import shutil
    import tempfile
    import time
    from feedbeast.course import grade as gr
    ap = argparse.ArgumentParser()
    ap.add_argument("--table", action="store_true")
    ap.add_argument("--budget", type=float, default=200)
    ap.add_argument("--racecheck", action="store_true")
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--reports", default=os.environ.get("FEEDBEAST_GRADE_REPORTS"))
    ap.add_argument("labs", nargs="*", default=["03", "04", "05", "06", "07"])
    a = ap.parse_args(argv)
    t0 = time.time()
    # the graded kernels and the racecheck runs start in other folders: PYTHONPATH=src must not be relative
    os.environ["PYTHONPATH"] = os.pathsep.join(str(Path(p).resolve()) for p in
                                               os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)
    tmp = Path(tempfile.mkdtemp(prefix="planted-"))
    jobs = [(lab, None) for lab in a.labs] + [(lab, bug) for lab in a.labs for bug in BUGS[lab]]
    races = [(lab, bug) for lab, bug in jobs if (lab, bug) in RACES]

    def grade_one(lab, bug):
        hangs = bug is not None and BUGS[lab][bug].hangs
        return gr.grade(planted(tmp, lab, bug), timeout=HANG_TIMEOUT if hangs else TIMEOUT)

    pool = concurrent.futures.ThreadPoolExecutor(a.jobs)
    futs = {key: pool.submit(grade_one, *key) for key in jobs}
    rpool = concurrent.futures.ThreadPoolExecutor(3)
    left = max(30, int(a.budget - 10))
    rfuts = {key: rpool.submit(_racecheck, tmp, *key, left) for key in races} if a.racecheck else {}
    hfuts = {key: rpool.submit(_hazards_direct, tmp, *key, left) for key in races} if a.racecheck else {}
    rows, bad = {}, 0
    while time.time() - t0 < a.budget and not all(f.done() for f in [*futs.values(), *rfuts.values(),
                                                                     *hfuts.values()]):
        time.sleep(1)
    print(f"\n| lab | planted bug | class | grading (status, exit, kinds, rule named, first failure) | as expected | "
          f"hazard checker (during grading) | hazard checker alone (SASS check let through) | "
          f"compute-sanitizer racecheck |\n|---|---|---|---|---|---|---|---|")
    for (lab, bug), f in futs.items():
        kind = "untouched solution" if bug is None else ("race" if (lab, bug) in RACES else "other")
        if not f.done():
            grading, ok, hz = "not finished in the budget", None, "-"
        else:
            try:
                rep = f.result()
                ok, grading = _verdict(lab, bug, rep)
                hz = _hazard_column(rep)
                if a.reports:
                    Path(a.reports).mkdir(parents=True, exist_ok=True)
                    (Path(a.reports) / f"{lab}-{bug or 'solution'}.txt").write_text(str(rep) + "\n")
            except Exception as e:      # noqa: BLE001
                ok, grading, hz = False, f"error {type(e).__name__}: {str(e)[:100]}", "-"
        bad += ok is False
        rc = hd = "-"
        if (lab, bug) in rfuts:
            rf, hf = rfuts[lab, bug], hfuts[lab, bug]
            rc = rf.result() if rf.done() else "not finished in the budget"
            hd = hf.result() if hf.done() else "not finished in the budget"
        print(f"| {lab} | {bug or '-'} | {kind} | {grading} | {'yes' if ok else 'NO' if ok is False else '-'} | "
              f"{hz} | {hd} | {rc} |", flush=True)
    print(f"\n{len(futs)} variants, {bad} not as expected, {time.time() - t0:.0f} s", flush=True)
    for log in sorted([*tmp.glob("*-racecheck.log"), *tmp.glob("*-hazards.log")]):
        if a.reports:
            shutil.copy(log, Path(a.reports) / log.name)
    os._exit(1 if bad else 0)


if __name__ == "__main__":
    import sys
    sys.exit(_table(sys.argv[1:]))
