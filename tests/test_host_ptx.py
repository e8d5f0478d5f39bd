"""Integer device code run on the host from its PTX (feedbeast.host_ptx, Kernel.run_on_host).

CPU: each result of a kernel of integer operations, on random inputs with both signs, against C's semantics
computed in Python; what the host run does not model refused by name before anything runs; what a GPU would leave
undefined or fault on named with its source line. GPU: the same kernel launched, bit for bit what the host run gave.
"""
from __future__ import annotations

import numpy as np
import pytest

import feedbeast as fb
from feedbeast import host_ptx
from feedbeast.host_ptx import HostRunFault, HostRunUnsupported

OPS = 20
SOURCE = r"""
extern "C" __global__ void int_ops(int* out, long long* wide, const int* a, const int* b, int n) {
  for (int i = threadIdx.x + blockIdx.x * blockDim.x; i < n; i += blockDim.x * gridDim.x) {
    const int x = a[i], y = b[i];
    const unsigned ux = x, uy = y;
    int* o = out + 20 * i;
    o[0] = x / y;             o[1] = x % y;            o[2] = min(x, y);          o[3] = max(x, y);
    o[4] = x >> (uy & 31);    o[5] = ux >> (uy & 31);  o[6] = x << (uy & 31);    o[7] = x * y;
    o[8] = __mulhi(x, y);     o[9] = ux / uy;          o[10] = ux % uy;           o[11] = x < y;
    o[12] = ux < uy;          o[13] = abs(x);          o[14] = __popc(ux);        o[15] = __clz(x);
    o[16] = (x ^ y) & ~y | 5; o[17] = x / 7 + x % 13;  o[18] = min(ux, uy);       o[19] = x > 0 && y < 0 ? -x : y;
    wide[2 * i] = (long long)x * y;
    wide[2 * i + 1] = ((long long)x << 20) / (y | 1);
  }
}
"""


def c_div(x, y):
    q = abs(x) // abs(y)
    return q if (x < 0) == (y < 0) else -q


def i32(v):
    return (v + 2**31) % 2**32 - 2**31


def reference(a, b):
    out, wide = [], []
    for x, y in zip(a.tolist(), b.tolist()):
        ux, uy = x % 2**32, y % 2**32
        s = uy & 31
        q = c_div(x, y)
        out += [q, x - q * y, min(x, y), max(x, y), x >> s, i32(ux >> s), i32(x << s), i32(x * y), (x * y) >> 32,
                i32(ux // uy), i32(ux % uy), int(x < y), int(ux < uy), i32(abs(x)), bin(ux).count("1"),
                32 - ux.bit_length(), i32(((x ^ y) & ~y) | 5), c_div(x, 7) + x - c_div(x, 13) * 13,
                i32(min(ux, uy)), -x if x > 0 and y < 0 else y]
        wide += [x * y, c_div(x << 20, y | 1)]
    return np.array(out, np.int64).reshape(-1, OPS), np.array(wide, np.int64).reshape(-1, 2)


def inputs(n, seed=1):
    rng = np.random.default_rng(seed)
    a = rng.integers(-2**31, 2**31, n, dtype=np.int64)
    b = rng.integers(-2**31, 2**31, n, dtype=np.int64)
    a[:8] = [0, -1, 1, 2**31 - 1, -2**31 + 1, 7, -7, 123456]      # edges: signs, the extremes, small values
    b[:8] = [5, 3, -3, 2, 16, -1, 33, 31]
    b[b == 0] = 1
    return a.astype(np.int32), b.astype(np.int32)


@pytest.fixture(scope="module")
def ops():
    return fb.compile(SOURCE, "sm_90a", name="int_ops.cu").int_ops


def test_integer_instructions_follow_c_semantics(ops):
    n = 300                       # more than the block: each thread's loop runs twice or more
    a, b = inputs(n)
    out = np.full((n, OPS), -1, np.int32)
    wide = np.full((n, 2), -1, np.int64)
    run = ops.run_on_host(2, 64, out, wide, a, b, n)
    want, want_wide = reference(a, b)
    bad = np.argwhere(out != want)
    assert not len(bad), [(int(i), int(k), int(a[i]), int(b[i]), int(out[i, k]), int(want[i, k])) for i, k in bad[:5]]
    assert (wide == want_wide).all()
    assert run.threads == 128 and run.steps > n * OPS, run
    assert "run on the host from its PTX" in str(run)


def test_the_gpu_writes_what_the_host_run_wrote(ops, gpu90):
    n = 1000
    a, b = inputs(n, seed=7)
    host, host_wide = np.full((n, OPS), -1, np.int32), np.full((n, 2), -1, np.int64)
    ops.run_on_host(3, 96, host, host_wide, a, b, n)
    dev, dev_wide = fb.empty((n, OPS), np.int32), fb.empty((n, 2), np.int64)
    assert ops.launch(3, 96, dev, dev_wide, fb.to_device(a), fb.to_device(b), n) is None
    assert (dev.to_host() == host).all() and (dev_wide.to_host() == host_wide).all()


@pytest.mark.parametrize("body, says", [
    ("__shared__ int t[32]; t[threadIdx.x % 32] = n; __syncthreads(); out[threadIdx.x] = t[0];",
     r"memory of its own|a barrier|ld\.shared|st\.shared"),
    ("out[threadIdx.x] = __shfl_sync(0xffffffff, n, 0);", "a warp shuffle"),
    ("out[threadIdx.x] = (int)(n * 0.5f + 1.25f);", r"uses `(cvt|mul|fma|add)\.[^`]*f32"),
    ("atomicAdd(out, n);", "an atomic"),
])
def test_what_it_does_not_model_is_refused_by_name(body, says):
    k = fb.compile('extern "C" __global__ void k(int* out, int n) {' + body + "}", "sm_90a", name="k.cu").k
    out = np.full(64, 7, np.int32)
    with pytest.raises(HostRunUnsupported, match=says):
        k.run_on_host(1, 32, out, 3)
    assert (out == 7).all()          # refused before anything ran


def _kernel(body):
    return fb.compile('extern "C" __global__ void k(int* out, int n, int d) {\n' + body + "\n}", "sm_90a",
                      name="k.cu").k


def test_a_division_by_zero_is_named_at_its_source_line():
    k = _kernel("  out[threadIdx.x] = n / (d - (int)threadIdx.x);")
    with pytest.raises(HostRunFault, match=r"div by zero \(thread \(3, 0, 0\)\).*unspecified|k\.cu line 2.*div by zero"):
        k.run_on_host(1, 8, np.zeros(8, np.int32), 100, 3)


def test_a_store_past_the_array_and_a_loop_that_never_ends_are_named():
    k = _kernel("  out[threadIdx.x * n] = 1;")
    with pytest.raises(HostRunFault, match=r"argument 0, whose array has 32 bytes"):
        k.run_on_host(1, 8, np.zeros(8, np.int32), 2, 0)
    spin = _kernel("  volatile int* v = out;\n  unsigned i = 0;\n  while (i != (unsigned)d) { i += 2; v[0] = i; }")
    ptx = spin.module.ptx
    out = np.zeros(1, np.int32)
    host_ptx.run(ptx, "k", (1, 1, 1), (1, 1, 1), [out, 0, 4])
    assert out[0] == 4
    with pytest.raises(HostRunFault, match="without ending"):
        host_ptx.run(ptx, "k", (1, 1, 1), (1, 1, 1), [out, 0, 3], step_limit=10_000)


def test_bad_arguments_are_refused_before_the_run():
    k = _kernel("  out[threadIdx.x] = n;")
    with pytest.raises(fb.FeedbeastError, match="takes 3 parameters, 2 were given"):
        k.run_on_host(1, 1, np.zeros(1, np.int32), 1)
    with pytest.raises(fb.FeedbeastError, match="numpy arrays for pointers"):
        k.run_on_host(1, 1, [0], 1, 2)
    with pytest.raises(fb.FeedbeastError, match="is an array, parameter .* not a pointer"):
        k.run_on_host(1, 1, np.zeros(1, np.int32), np.zeros(1, np.int32), 2)
    with pytest.raises(fb.FeedbeastError, match="does not fit"):
        k.run_on_host(1, 1, np.zeros(1, np.int32), 2**40, 2)
