"""feedbeast.barriers: a cuda.syncthreads() that not every thread of the block reaches, read from the source.

Numba's simulator runs such a kernel as if it were right (lab 01's tree with its barrier inside `if lane < s` passed
there); the source check names the barrier and the condition that splits the block, and leaves alone what the
CUDA guide and the PTX ISA allow: a barrier under a condition the whole block shares, and threads that return first.
"""
from __future__ import annotations

import textwrap

import pytest

import feedbeast.numba_support as fbn
from feedbeast.barriers import divergent_barriers

SIM = fbn.setup()
from numba import cuda, float32  # noqa: E402

SOURCE = textwrap.dedent('''
    from numba import cuda, float32, int32; import functools

    @cuda.jit
    def tree_ok(x):
        s = cuda.shared.array(32, float32)
        t = cuda.threadIdx.x
        s[t] = x[t]
        cuda.syncthreads()
        w = 16
        while w > 0:
            if t < w:
                s[t] += s[t + w]
            cuda.syncthreads()
            w //= 2

    @cuda.jit
    def tree_in_branch(x):
        t = cuda.threadIdx.x
        w = 16
        while w > 0:
            if t < w:
                x[t] += x[t + w]
                cuda.syncthreads()
            w //= 2

    @cuda.jit
    def returns_first(x):
        i = cuda.grid(1)
        if i >= 20:
            return
        cuda.syncthreads()

    @cuda.jit
    def leaves_the_loop(x):
        lane, r0 = cuda.threadIdx.x, cuda.blockIdx.x * 8
        for j in range(4):
            if lane + j > 30:
                break
            cuda.syncthreads()

    @cuda.jit
    def no_barrier(x):
        t = cuda.threadIdx.x
        x[t] = 1.0

    @cuda.jit
    def two_per_tile(x):
        s = cuda.shared.array(32, float32)
        t = cuda.threadIdx.x
        for j in range(4):
            s[t] = x[j * 32 + t]
            cuda.syncthreads()
            x[j * 32 + t] = s[31 - t]
            cuda.syncthreads()

    @cuda.jit
    def guards(x, y):
        lane, w = cuda.threadIdx.x, cuda.threadIdx.y
        r0 = cuda.blockIdx.y * 32
        for j in range(4):
            i = w + j * 8
            if r0 + i < x.shape[0]:
                y[i] = x[i]
                cuda.syncthreads()
        if r0 < 100:
            cuda.syncthreads()

    @cuda.jit(device=True)
    def sync_helper():
        cuda.syncthreads()

    @cuda.jit(device=True)
    def split_helper(lane):
        if lane < 16:
            cuda.syncthreads()
        else:
            cuda.syncthreads()

    @cuda.jit
    def split_in_a_helper(x):
        split_helper(cuda.threadIdx.x)

    @cuda.jit
    def helper_of_the_block(x):
        split_helper(cuda.blockIdx.x)

    @cuda.jit
    def helper_under_a_split(x):
        if cuda.threadIdx.x < 16:
            sync_helper()

    @cuda.jit
    def two_helpers_per_tile(x, n):
        for j in range(n):
            x[cuda.threadIdx.x] = j
            sync_helper()
            sync_helper()

    @cuda.jit
    def barrier_in_a_helper(x):
        t = cuda.threadIdx.x
        x[t] = 1.0
        sync_helper()

    @cuda.jit
    def one_per_branch(x):
        t = cuda.threadIdx.x
        for j in range(4):
            if j % 2 == 0:
                x[t] = 1.0
                cuda.syncthreads()
            else:
                x[t] = 2.0
                cuda.syncthreads()

    @cuda.jit
    def name_reused_for_the_block(x, rows):
        w = cuda.threadIdx.y
        r = w * 4                        # the thread's row: differs between threads
        x[r] = 1.0
        cuda.syncthreads()
        for t in range(4):
            r = (t + 1) * 32             # the next tile's first row: the same for the whole block
            if r < rows:
                x[r + w] = 2.0
                cuda.syncthreads()

    @cuda.jit
    def name_thread_dependent_on_the_next_pass(x, rows):
        r = 0
        for t in range(4):
            if r < rows:                 # the first pass: the block's; later passes: the thread's
                cuda.syncthreads()
            r = cuda.threadIdx.x + t

    @cuda.jit
    def two_in_an_inner_loop(x):
        t = cuda.threadIdx.x
        for j in range(4):
            for phase in range(2):
                x[t] = phase
                cuda.syncthreads()

    @cuda.jit
    def prologue_in_the_loop(x, n):
        t = cuda.threadIdx.x
        for j in range(n):
            if j == 0:
                x[t] = 0.0
                cuda.syncthreads()
            x[t] += 1.0
            if n - 1 == j:
                x[t] += 2.0
                cuda.syncthreads()
            else:
                cuda.syncthreads()

    @cuda.jit
    def tiles_in_a_grid_stride_loop(x, n, strips):
        t = cuda.threadIdx.x
        for s in range(cuda.blockIdx.x, strips, cuda.gridDim.x):
            x[t] = s
            cuda.syncthreads()
            for j in range(n):
                x[t] += j
                cuda.syncthreads()

    @cuda.jit
    def first_pass_not_once(x, n):
        t = cuda.threadIdx.x
        for j in range(n):
            j = j + 1
            if j == 0:
                cuda.syncthreads()
            cuda.syncthreads()

    @cuda.jit
    def through_a_local_array(x):
        me = cuda.local.array(1, int32)
        me[0] = cuda.threadIdx.x
        if me[0] < 16:
            cuda.syncthreads()
        else:
            cuda.syncthreads()

    @cuda.jit
    def through_an_atomic(x, ticket):
        if cuda.atomic.add(ticket, 0, 1) % 2 == 0:
            cuda.syncthreads()

    @cuda.jit
    def local_array_of_block_values(x):
        me = cuda.local.array(1, int32)
        me[0] = cuda.blockIdx.x
        if me[0] < 16:
            cuda.syncthreads()

    TWO = 2

    @cuda.jit(device=True)
    def tiles_in_a_helper(x, n):
        for t in range(n):
            x[cuda.threadIdx.x] = t
            cuda.syncthreads()

    @cuda.jit
    def calls_a_tile_loop(x, n):
        tiles_in_a_helper(x, n)

    @cuda.jit(device=True)
    def one_buffer_tiles(x, n):
        cuda.syncthreads()
        for t in range(n):
            x[cuda.threadIdx.x] = t
            cuda.syncthreads()
            x[cuda.threadIdx.x] += 1.0
            cuda.syncthreads()

    @cuda.jit
    def calls_one_buffer_tiles(x, n):
        one_buffer_tiles(x, n)

    @cuda.jit
    def phases_by_a_global(x, n):
        for t in range(n):
            for ph in range(TWO):
                x[cuda.threadIdx.x] = ph
                cuda.syncthreads()

    @cuda.jit
    def phases_by_a_while(x, n):
        for t in range(n):
            ph = 0
            while ph < 2:
                x[cuda.threadIdx.x] = ph
                cuda.syncthreads()
                ph += 1

    @cuda.jit
    def not_once_through_an_alias(x, n):
        for t in range(n):
            u = t
            if t == u:
                cuda.syncthreads()
            cuda.syncthreads()

    @cuda.jit
    def prologue_if_not_t(x, n):
        for t in range(n):
            if not t:
                x[cuda.threadIdx.x] = 0.0
                cuda.syncthreads()
            cuda.syncthreads()

    @cuda.jit
    def vote_loop(x):
        more = cuda.threadIdx.x < 8
        while cuda.syncthreads_or(more):
            more = False
            cuda.syncthreads()

    @cuda.jit(device=True)
    def sync_unless_last(i, n):
        if i + 1 < n:
            cuda.syncthreads()

    @cuda.jit
    def name_reused_at_the_call(x, n):
        w = cuda.threadIdx.y
        for j in range(4):
            i = w + j * 8
            x[i] = 1.0
        for i in range(n):
            sync_unless_last(i, n)

    def make_with_a_captured_helper(n):
        @cuda.jit(device=True)
        def stage(x):
            cuda.syncthreads()

        @cuda.jit
        def captured(x):
            x[cuda.threadIdx.x] = n
            stage(x)
        return captured

    @cuda.jit(device=True)
    def my_row():
        return cuda.threadIdx.y

    @cuda.jit
    def split_by_a_returned_index(x):
        if my_row() < 4:
            cuda.syncthreads()

    @cuda.jit
    def split_by_an_aliased_atomic(x, ticket):
        atom = cuda.atomic
        if atom.add(ticket, 0, 1.0) < 128.0:
            cuda.syncthreads()

    def decoy(x):
        cuda.syncthreads()

    @cuda.jit
    @functools.wraps(decoy)
    def wrapped(x):
        if cuda.threadIdx.x < 16:
            cuda.syncthreads()

    @cuda.jit
    def prologue_forms(x, n):
        t = 0
        while t < n:                      # a while counter
            if t == 0:
                cuda.syncthreads()
            cuda.syncthreads()
            t += 1
        for t in range(n):
            if t < 1:
                cuda.syncthreads()
            cuda.syncthreads()
        for t in range(n):
            if 0 >= t:
                cuda.syncthreads()
            cuda.syncthreads()
        for t, r in enumerate(range(0, 4 * n, 4)):
            if t == 0:
                cuda.syncthreads()
            cuda.syncthreads()
        first = True
        for t in range(n):
            if first:
                cuda.syncthreads()
                first = False
            cuda.syncthreads()

    @cuda.jit
    def not_prologues(x, n):
        for t in range(-2, n):            # starts below 0: t < 1 holds on three passes
            if t < 1:
                cuda.syncthreads()
            cuda.syncthreads()
        first = True
        for t in range(n):
            if first:
                cuda.syncthreads()
            if t == 5:
                first = False
            cuda.syncthreads()

    @cuda.jit(device=True)
    def coords():
        return cuda.threadIdx.x, cuda.blockIdx.x * 4

    @cuda.jit
    def block_value_from_a_tuple(x, n):
        lane, t0 = coords()
        for t in range(t0, n):
            x[lane] = t
            cuda.syncthreads()

    @cuda.jit
    def thread_value_from_a_tuple(x, n):
        lane, t0 = coords()
        if lane < 4:
            cuda.syncthreads()

    @cuda.jit
    def looks_once_but_is_not(x, n):
        t = 0
        k = 0
        while k < n:                      # t advances on some passes only
            if t == 0:
                cuda.syncthreads()
            cuda.syncthreads()
            if k % 2 == 1:
                t += 1
            k += 1
        t = 0
        k = 0
        while k < n:                      # a continue skips the increment
            k += 1
            if t == 0:
                cuda.syncthreads()
            cuda.syncthreads()
            if k < 3:
                continue
            t += 1
        first = True
        for t in range(n):                # a continue skips the clearing
            if first:
                cuda.syncthreads()
            cuda.syncthreads()
            if t < 3:
                continue
            first = False
        for t in range(0, -n, -1):        # counts down
            if t < 1:
                cuda.syncthreads()
            cuda.syncthreads()
        b = (-3, n)
        for t in range(*b):               # a start it cannot read
            if t < 1:
                cuda.syncthreads()
            cuda.syncthreads()

    @cuda.jit
    def enumerate_from_one(x, n):
        for t, r in enumerate(range(n), 1):
            if t == 1:
                cuda.syncthreads()
            cuda.syncthreads()

    @cuda.jit
    def counter_in_an_array(x, n):
        for t in range(n):
            if t == x[0]:                 # x[0] follows t: true on every pass
                cuda.syncthreads()
            x[0] = t + 1
            cuda.syncthreads()

    @cuda.jit(device=True)
    def pick():
        if cuda.threadIdx.x < 4:
            return 0
        return 1

    @cuda.jit
    def split_by_where_threads_return(x):
        if pick() == 0:
            cuda.syncthreads()

    @cuda.jit(device=True)
    def inner_pair():
        return cuda.threadIdx.x, 0

    @cuda.jit(device=True)
    def outer_pair():
        a, b = inner_pair()
        return b, a

    @cuda.jit
    def tuple_through_two_helpers(x):
        z, lane = outer_pair()
        if z < 4:
            cuda.syncthreads()
        if lane < 4:
            cuda.syncthreads()

    @cuda.jit
    def prologue_forms_too(x, n):
        t = 0
        while t < n:                      # advanced once on every pass, in one branch or the other
            if t == 0:
                cuda.syncthreads()
            cuda.syncthreads()
            if n > 4:
                t += 1
            else:
                t += 1
        for t in range(n):                # the test reads the range's t; an inner loop reuses the name after it
            if t == 0:
                cuda.syncthreads()
            cuda.syncthreads()
            for t in range(2):
                x[t] = 0.0

    @cuda.jit
    def reused_before_the_test(x, n):
        for t in range(n):
            for t in range(2):            # t is 1 whenever the test reads it: not the first pass only
                x[t] = 0.0
            if t == 1:
                cuda.syncthreads()
            cuda.syncthreads()

    @cuda.jit
    def three_phases(x):
        t = cuda.threadIdx.x
        for j in range(4):
            for phase in (0, 1, 2):
                x[t] = phase
                cuda.syncthreads()
''')


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    from conftest import module_from_source
    return module_from_source(tmp_path_factory.mktemp("barriers"), "fb_barrier_cases", SOURCE)


def test_barriers_the_whole_block_reaches_are_left_alone(kernels):
    assert divergent_barriers(kernels.tree_ok) == []
    assert divergent_barriers(kernels.returns_first) == []       # returned threads no longer take part


def test_a_barrier_only_some_threads_reach_is_named_with_its_condition(kernels):
    assert divergent_barriers(kernels.tree_in_branch) == ["line 24: cuda.syncthreads() under line 22: if t < w:"]
    assert divergent_barriers(kernels.leaves_the_loop) == [
        "line 40: cuda.syncthreads() under line 38: if lane + j > 30:"]
    # the guard on the thread's row splits the block; the one on the block's first row does not
    assert divergent_barriers(kernels.guards) == ["line 65: cuda.syncthreads() under line 63: if r0 + i < x.shape[0]:"]


def test_the_check_raises_and_says_what_to_do(kernels):
    import feedbeast as fb
    with pytest.raises(fb.CheckFailed, match=r"kernel tree_in_branch: a barrier that not every thread .* line 24.*"
                                             r"Synchronization Functions"):
        fbn.expect_uniform_barriers(kernels.tree_in_branch)
    assert fbn.expect_uniform_barriers(kernels.tree_ok) == "barriers of tree_ok: 2, every one reached by the whole block"
    made = {}
    exec("def k(x):\n    cuda.syncthreads()\n", {"cuda": cuda}, made)
    assert isinstance(fbn.expect_uniform_barriers(made["k"], required=True), fb.Skipped)     # no file to read: a named skip
    assert isinstance(fbn.expect_uniform_barriers(made["k"]), fb.Skipped)


def test_the_course_s_own_numba_kernels_pass_it():
    """No false alarm on the kernels the chapters and solutions teach with: every function with a barrier in a code
    cell of chapters 01-02 and solutions 01-02 (chapter 02's rowsum_db stores into `tile[1 - cur, f // tw, ...]`:
    an element stored to binds no name, so `tw` stays the block's)."""
    import ast
    import json
    from pathlib import Path

    from feedbeast.barriers import _Reader
    root = Path(__file__).resolve().parents[1]
    seen = {}
    for path in ("chapters/01-synchronous-loads.ipynb", "chapters/02-software-pipelining.ipynb",
                 "solutions/01-tiled-transpose.ipynb", "solutions/02-double-buffered-transpose.ipynb"):
        for cell in json.loads((root / path).read_text())["cells"]:
            src = "".join(cell["source"])
            if cell["cell_type"] != "code" or "syncthreads" not in src or src.lstrip().startswith("%"):
                continue
            for fn in ast.walk(ast.parse(src)):
                if isinstance(fn, ast.FunctionDef) and "syncthreads" in ast.unparse(fn):
                    seen[f"{path}:{fn.name}"] = _Reader(fn).divergent()
    assert {"chapters/02-software-pipelining.ipynb:rowsum_db", "solutions/01-tiled-transpose.ipynb:transpose_tiled",
            "solutions/02-double-buffered-transpose.ipynb:transpose_db"} <= set(seen), sorted(seen)
    assert not {k: v for k, v in seen.items() if v}, seen


LAMBDA = """
from numba import cuda

nothing = cuda.jit(device=True)(lambda: 0)


@cuda.jit
def naive(x, y):
    i = cuda.grid(1)
    nothing()
    if i < x.size:
        y[i] = x[i]
"""


def test_a_device_function_written_as_a_lambda_fails_the_checks_that_read_it(tmp_path):
    """A lambda's source is the line it stands on: the barrier count and the compiler's process cannot read it,
    and a skip there would turn a kernel without its barrier into a partial grade."""
    import numpy as np

    import feedbeast as fb
    from conftest import module_from_source
    from feedbeast.numba_compile import compile_in_child
    m = module_from_source(tmp_path, "fb_lambda_case", LAMBDA)
    with pytest.raises(fb.CheckFailed, match="nothing, a device function written as a lambda"):
        fbn.expect_uniform_barriers(m.naive, required=True)
    x = np.ones(5, np.float32)
    assert "lambda" in compile_in_child(m.naive, (x, x))


def test_a_kernel_that_needs_a_barrier_and_has_none_is_told_so(kernels):
    """Lab 01 without its barrier: the simulator's output then reads as elements never written, which points at the
    guards; the check names the missing barrier first."""
    import feedbeast as fb
    assert fbn.expect_uniform_barriers(kernels.no_barrier) == "barriers of no_barrier: none"
    with pytest.raises(fb.CheckFailed, match=r"kernel no_barrier has no cuda.syncthreads\(\)"):
        fbn.expect_uniform_barriers(kernels.no_barrier, required=True)
    assert "every one reached" in fbn.expect_uniform_barriers(kernels.tree_ok, required=True)


def test_barriers_are_counted_per_loop(kernels):
    """Lab 02's design, two buffers and one barrier per tile: a one-buffer kernel (two per tile) is told so; a
    barrier before the loop (the prologue's) is not the loop's."""
    import feedbeast as fb
    from feedbeast.barriers import barriers_by_loop
    assert barriers_by_loop(kernels.two_per_tile) == {51: [53, 55]}
    assert barriers_by_loop(kernels.tree_ok) == {None: [9], 11: [14]}
    assert barriers_by_loop(kernels.no_barrier) == {}
    with pytest.raises(fb.CheckFailed, match=r"one pass of the loop at line 51 can reach 2 barriers \(lines 53, 55\); "
                                             r"this kernel's design allows 1 per iteration"):
        fbn.expect_uniform_barriers(kernels.two_per_tile, per_loop=1)
    assert fbn.expect_uniform_barriers(kernels.tree_ok, per_loop=1).endswith("at most 1 per loop iteration")


def test_a_pass_counts_one_branch_and_an_inner_loop_more_than_once(kernels):
    """per_loop counts what one pass can reach on one path: an if/else with a barrier in each branch is one; a loop
    inside the tile loop that holds a barrier passes it more than once. A barrier in a device function the kernel
    calls is the kernel's barrier at the call."""
    import feedbeast as fb
    from feedbeast.barriers import most_per_iteration
    assert fbn.expect_uniform_barriers(kernels.one_per_branch, per_loop=1).endswith("at most 1 per loop iteration")
    assert sorted(most_per_iteration(kernels.two_in_an_inner_loop).values()) == [1, 2]   # inner, outer
    with pytest.raises(fb.CheckFailed, match=r"one pass of the loop at line \d+ can reach 2 barriers"):
        fbn.expect_uniform_barriers(kernels.two_in_an_inner_loop, per_loop=1)
    assert fbn.expect_uniform_barriers(kernels.barrier_in_a_helper, required=True).endswith(
        "1, every one reached by the whole block")


def test_a_name_is_the_thread_s_only_where_its_last_assignment_makes_it_so(kernels):
    """Flow-sensitive: a name reassigned from what the whole block shares is the block's again (the next tile's row
    after the prologue's own row); a value that reaches the condition on a later pass of the loop still counts."""
    assert divergent_barriers(kernels.name_reused_for_the_block) == []
    found = divergent_barriers(kernels.name_thread_dependent_on_the_next_pass)
    assert len(found) == 1 and "if r < rows:" in found[0], found


def test_a_prologue_folded_into_the_loop_and_a_grid_stride_loop_keep_one_per_tile(kernels):
    """Lab 02's design allows one barrier per tile in the steady state: a branch that holds on one pass only (`if j ==
    0`, `if n - 1 == j`: the prologue or the epilogue folded into the tile loop) is not counted, and a tile loop inside
    a grid-stride loop over strips is a loop of its own. A branch on a counter the body reassigns before it still
    counts, and a loop of a constant trip count inside the tile loop counts that many times."""
    import feedbeast as fb
    from feedbeast.barriers import most_per_iteration
    assert fbn.expect_uniform_barriers(kernels.prologue_in_the_loop, per_loop=1).endswith("at most 1 per loop iteration")
    assert sorted(most_per_iteration(kernels.tiles_in_a_grid_stride_loop).values()) == [1, 1]
    assert fbn.expect_uniform_barriers(kernels.tiles_in_a_grid_stride_loop, per_loop=1).endswith("per loop iteration")
    with pytest.raises(fb.CheckFailed, match=r"can reach 2 barriers"):
        fbn.expect_uniform_barriers(kernels.first_pass_not_once, per_loop=1)
    assert sorted(most_per_iteration(kernels.three_phases).values()) == [1, 3]
    with pytest.raises(fb.CheckFailed, match=r"can reach 3 barriers \(lines (\d+)\)"):
        fbn.expect_uniform_barriers(kernels.three_phases, per_loop=1)


def test_what_differs_between_threads_through_a_local_array_or_an_atomic(kernels):
    """A per-thread local array stored from the thread's index, and an atomic's old value, differ between threads
    as much as threadIdx does; a local array of what the block shares does not."""
    assert len(divergent_barriers(kernels.through_a_local_array)) == 2
    assert len(divergent_barriers(kernels.through_an_atomic)) == 1
    assert divergent_barriers(kernels.local_array_of_block_values) == []


def test_a_device_function_s_barriers_are_read_where_it_is_called(kernels):
    """A barrier inside a device function: divergent when the function splits the block on a parameter the call
    passes from the thread (not from the block), or when the call itself sits in such a branch; counted per tile
    as many times as the tile loop calls it."""
    import feedbeast as fb
    found = divergent_barriers(kernels.split_in_a_helper)
    assert len(found) == 2 and all("in the device function split_helper" in f for f in found), found
    assert divergent_barriers(kernels.helper_of_the_block) == []
    found = divergent_barriers(kernels.helper_under_a_split)
    assert len(found) == 1 and "sync_helper()" in found[0], found
    with pytest.raises(fb.CheckFailed, match=r"can reach 2 barriers"):
        fbn.expect_uniform_barriers(kernels.two_helpers_per_tile, required=True, per_loop=1)


def test_barriers_in_device_functions_loops_aliases_and_votes(kernels):
    """What a review found: a device function whose barrier sits in its own tile loop is a barrier (and its loop is
    counted: one buffer, two per tile, is told so); a constant inner trip count may be a global, and a `while` inside
    the tile loop passes more than once; `t == u` holds once only when u is the same on every pass; `if not t` is the
    first pass; a block-wide vote (syncthreads_or) is the same in every thread; a device function's argument is judged
    where the call stands; a captured helper is read; a returned threadIdx and an aliased atomic differ between
    threads; functools.wraps does not hand the check another function's source."""
    import feedbeast as fb
    from feedbeast.barriers import most_per_iteration
    assert fbn.expect_uniform_barriers(kernels.calls_a_tile_loop, required=True, per_loop=1).endswith("per loop iteration")
    with pytest.raises(fb.CheckFailed, match=r"can reach 2 barriers"):
        fbn.expect_uniform_barriers(kernels.calls_one_buffer_tiles, required=True, per_loop=1)
    for k in (kernels.phases_by_a_global, kernels.phases_by_a_while, kernels.not_once_through_an_alias):
        assert max(most_per_iteration(k).values()) >= 2, k.__name__
    assert max(most_per_iteration(kernels.prologue_if_not_t).values()) == 1
    assert divergent_barriers(kernels.vote_loop) == []
    assert divergent_barriers(kernels.name_reused_at_the_call) == []
    assert fbn.expect_uniform_barriers(kernels.make_with_a_captured_helper(3), required=True).endswith("whole block")
    assert len(divergent_barriers(kernels.split_by_a_returned_index)) == 1
    assert len(divergent_barriers(kernels.split_by_an_aliased_atomic)) == 1
    found = divergent_barriers(kernels.wrapped)
    assert len(found) == 1 and "threadIdx.x < 16" in found[0], found


def test_a_prologue_folded_in_any_usual_form_and_indices_returned_as_a_tuple(kernels):
    """Ways a learner folds the prologue into the tile loop: a while counter, `t < 1`, `0 >= t`, enumerate, a flag
    cleared on its first pass; not when the range starts below 0 or the flag stays set. A device function returning
    (thread index, block index): each name as its own element."""
    from feedbeast.barriers import most_per_iteration
    assert set(most_per_iteration(kernels.prologue_forms).values()) == {1}
    assert sorted(most_per_iteration(kernels.not_prologues).values()) == [2, 2]
    assert divergent_barriers(kernels.block_value_from_a_tuple) == []
    assert len(divergent_barriers(kernels.thread_value_from_a_tuple)) == 1


def test_what_only_looks_like_a_first_pass_counts_twice(kernels):
    """A counter advanced on some passes only, a continue before the increment or before a flag is cleared, a range
    counting down or with a start the check cannot read: each of these holds on more than one pass. enumerate from 1
    with `t == 1` is the first pass."""
    from feedbeast.barriers import most_per_iteration
    assert sorted(most_per_iteration(kernels.looks_once_but_is_not).values()) == [2, 2, 2, 2, 2]
    assert list(most_per_iteration(kernels.enumerate_from_one).values()) == [1]


def test_an_array_that_follows_the_counter_a_return_that_splits_and_a_tuple_through_two_helpers(kernels):
    """`t == x[0]` with x[0] stored in the loop is not a first pass; a device function whose threads return at
    different places returns what differs between threads; a tuple handed on by a second device function keeps
    each element's own reading."""
    from feedbeast.barriers import most_per_iteration
    assert list(most_per_iteration(kernels.counter_in_an_array).values()) == [2]
    assert len(divergent_barriers(kernels.split_by_where_threads_return)) == 1
    found = divergent_barriers(kernels.tuple_through_two_helpers)
    assert len(found) == 1 and "if lane < 4:" in found[0], found


def test_a_while_counter_advanced_in_both_branches_and_a_counter_reused_after_the_test(kernels):
    """Two more forms of the first pass: a while counter advanced in either branch of an if/else, and a range's counter
    read before an inner loop reuses its name. Reused before the test, it is not the range's value."""
    from feedbeast.barriers import most_per_iteration
    assert set(most_per_iteration(kernels.prologue_forms_too).values()) == {1}
    assert max(most_per_iteration(kernels.reused_before_the_test).values()) == 2


def test_a_barrier_imported_by_its_own_name_is_a_barrier(tmp_path, monkeypatch):
    """`from numba.cuda import syncthreads` (a GPU's numba.cuda exports it; the simulator does not): `syncthreads()`
    and `sync()` after `... as sync` are the barrier, counted and checked as cuda.syncthreads() is; a function of the
    learner's that is only named so is not."""
    import importlib.util
    import sys
    import types

    from feedbeast.barriers import barriers_by_loop
    barrier = object()                                   # what a GPU's numba.cuda.syncthreads is: one object
    monkeypatch.setitem(sys.modules, "numba.cuda", types.SimpleNamespace(syncthreads=barrier))
    (tmp_path / "k_alias.py").write_text(textwrap.dedent('''
        def kernel(x):
            t = cuda.threadIdx.x
            syncthreads()
            for j in range(4):
                if t < j:
                    sync()
                x[t] += 1

        def own(x, t):
            x[t] = 1
            mine()

        def plain(x):
            x[0] = 1

        def mixed(x):
            t = cuda.threadIdx.x
            helper(x)
            if t < 4:
                sync(x)
        '''))
    spec = importlib.util.spec_from_file_location("k_alias", tmp_path / "k_alias.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.syncthreads = mod.sync = barrier
    mod.mine = lambda: None
    mod.mine.__name__ = "syncthreads"
    assert barriers_by_loop(mod.kernel) == {None: [4], 5: [7]}
    found = divergent_barriers(mod.kernel)
    assert len(found) == 1 and "line 7" in found[0], found
    assert barriers_by_loop(mod.own) == {}
    # a device function from another module that has the alias: the kernel's own `sync`, no barrier, stays none
    (tmp_path / "k_other.py").write_text("def helper(x):\n    sync()\n")
    spec = importlib.util.spec_from_file_location("k_other", tmp_path / "k_other.py")
    other = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(other)
    other.sync = barrier
    mod.helper, mod.sync = types.SimpleNamespace(py_func=other.helper), types.SimpleNamespace(py_func=mod.plain)
    assert divergent_barriers(mod.mixed) == []
