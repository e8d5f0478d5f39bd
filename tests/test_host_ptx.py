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

OPS = 23
SOURCE = r"""
extern "C" __global__ void int_ops(int* out, long long* wide, const int* a, const int* b, const signed char* c,
                                   short h, int n) {
  for (int i = threadIdx.x + blockIdx.x * blockDim.x; i < n; i += blockDim.x * gridDim.x) {
    const int x = a[i], y = b[i];
    const unsigned ux = x, uy = y;
    int* o = out + 23 * i;
    o[0] = x / y;             o[1] = x % y;            o[2] = min(x, y);          o[3] = max(x, y);
    o[4] = x >> (uy & 31);    o[5] = ux >> (uy & 31);  o[6] = x << (uy & 31);    o[7] = x * y;
    o[8] = __mulhi(x, y);     o[9] = ux / uy;          o[10] = ux % uy;           o[11] = x < y;
    o[12] = ux < uy;          o[13] = abs(x);          o[14] = __popc(ux);        o[15] = __clz(x);
    o[16] = (x ^ y) & ~y | 5; o[17] = x / 7 + x % 13;  o[18] = min(ux, uy);       o[19] = x > 0 && y < 0 ? -x : y;
    o[20] = c[i];             o[21] = h * (x & 3);     o[22] = (signed char)x;    // narrow signed: sign-extended
    wide[2 * i] = (long long)x * y;
    wide[2 * i + 1] = ((long long)x << 20) / (y | 1);
  }
}
"""


BIT_OPS = r"""
extern "C" __global__ void bit_ops(unsigned* out, const int* a, const int* b, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int x = a[i], y = b[i];
    unsigned* o = out + 8 * i;
    unsigned e, f, g;
    asm("bfe.s32 %0, %1, %2, %3;" : "=r"(e) : "r"(x), "r"(y & 63), "r"((y >> 8) & 63));
    asm("bfe.u32 %0, %1, %2, %3;" : "=r"(f) : "r"(x), "r"(y & 63), "r"((y >> 8) & 63));
    asm("bfi.b32 %0, %1, %2, %3, %4;" : "=r"(g) : "r"(x), "r"(y), "r"((y >> 16) & 63), "r"((y >> 24) & 63));
    o[0] = __ffs(x);  o[1] = __funnelshift_l(x, y, y);  o[2] = __funnelshift_rc(x, y, y >> 3);  o[3] = __clz(x);
    o[4] = e;         o[5] = f;                          o[6] = g;                               o[7] = __ffsll(x);
  }
}
"""


def bit_reference(a, b):
    """C's meaning of each result of BIT_OPS; bfe and bfi as the PTX ISA defines them ("bfe", "bfi")."""
    out = []
    for x, y in zip(a.tolist(), b.tolist()):
        ux, uy = x % 2**32, y % 2**32
        pos, length = y & 63, (y >> 8) & 63
        field = [(ux >> (pos + i)) & 1 if i < length and pos + i < 32 else None for i in range(32)]
        sign = (ux >> min(pos + length - 1, 31)) & 1 if length else 0
        bfe_s = sum((bit if bit is not None else sign) << i for i, bit in enumerate(field))
        bfe_u = sum((bit or 0) << i for i, bit in enumerate(field))
        ipos, ilen, g = (y >> 16) & 63, (y >> 24) & 63, uy
        for i in range(ilen):
            if ipos + i < 32:
                g = g & ~(1 << (ipos + i)) | (((ux >> i) & 1) << (ipos + i))
        low = (ux & -ux).bit_length()                       # __ffs: 1 + the lowest set bit, 0 for none
        out += [low, (((uy << 32) | ux) << (uy & 31)) >> 32 & 0xffffffff,
                (((uy << 32) | ux) >> min((y >> 3) % 2**32, 32)) & 0xffffffff, 32 - ux.bit_length(), bfe_s, bfe_u, g,
                ((x % 2**64) & -(x % 2**64)).bit_length()]
    return np.array(out, np.int64).reshape(-1, 8) % 2**32


def c_div(x, y):
    q = abs(x) // abs(y)
    return q if (x < 0) == (y < 0) else -q


def i32(v):
    return (v + 2**31) % 2**32 - 2**31


def reference(a, b, c, h):
    out, wide = [], []
    for x, y, ci in zip(a.tolist(), b.tolist(), c.tolist()):
        ux, uy = x % 2**32, y % 2**32
        s = uy & 31
        q = c_div(x, y)
        out += [q, x - q * y, min(x, y), max(x, y), x >> s, i32(ux >> s), i32(x << s), i32(x * y), (x * y) >> 32,
                i32(ux // uy), i32(ux % uy), int(x < y), int(ux < uy), i32(abs(x)), bin(ux).count("1"),
                32 - ux.bit_length(), i32(((x ^ y) & ~y) | 5), c_div(x, 7) + x - c_div(x, 13) * 13,
                i32(min(ux, uy)), -x if x > 0 and y < 0 else y, ci, h * (x & 3), (x + 128) % 256 - 128]
        wide += [x * y, c_div(x << 20, y | 1)]
    return np.array(out, np.int64).reshape(-1, OPS), np.array(wide, np.int64).reshape(-1, 2)


def inputs(n, seed=1):
    rng = np.random.default_rng(seed)
    a = rng.integers(-2**31, 2**31, n, dtype=np.int64)
    b = rng.integers(-2**31, 2**31, n, dtype=np.int64)
    a[:8] = [0, -1, 1, 2**31 - 1, -2**31 + 1, 7, -7, 123456]      # edges: signs, the extremes, small values
    b[:8] = [5, 3, -3, 2, 16, -1, 33, 31]
    b[b == 0] = 1
    return a.astype(np.int32), b.astype(np.int32), rng.integers(-128, 128, n).astype(np.int8)


@pytest.fixture(scope="module")
def ops():
    return fb.compile(SOURCE, "sm_90a", name="int_ops.cu").int_ops


def test_integer_instructions_follow_c_semantics(ops):
    n = 300                       # more than the block: each thread's loop runs twice or more
    a, b, c = inputs(n)
    out = np.full((n, OPS), -1, np.int32)
    wide = np.full((n, 2), -1, np.int64)
    run = ops.run_on_host(2, 64, out, wide, a, b, c, -3, n)
    want, want_wide = reference(a, b, c, -3)
    bad = np.argwhere(out != want)
    assert not len(bad), [(int(i), int(k), int(a[i]), int(b[i]), int(out[i, k]), int(want[i, k])) for i, k in bad[:5]]
    assert (wide == want_wide).all()
    assert run.threads == 128 and run.steps > n * OPS, run
    assert "run on the host from its PTX" in str(run)


def test_bit_field_and_funnel_instructions():
    k = fb.compile(BIT_OPS, "sm_90a", name="bit_ops.cu").bit_ops
    a, b, _ = inputs(400, seed=3)
    out = np.zeros((400, 8), np.uint32)
    k.run_on_host(1, 128, out, a, b, 400)
    want = bit_reference(a, b)
    bad = np.argwhere(out != want)
    assert not len(bad), [(int(i), int(j), int(a[i]), int(b[i]), int(out[i, j]), int(want[i, j])) for i, j in bad[:5]]
    ptx = k.module.ptx
    assert all(op in ptx for op in ("bfind.shiftamt", "shf.l.wrap", "shf.r.clamp", "bfe.s32", "bfi.b32")), ptx


def test_the_gpu_writes_what_the_host_run_wrote(ops, gpu90):
    n = 1000
    a, b, c = inputs(n, seed=7)
    host, host_wide = np.full((n, OPS), -1, np.int32), np.full((n, 2), -1, np.int64)
    ops.run_on_host(3, 96, host, host_wide, a, b, c, -12345, n)
    dev, dev_wide = fb.empty((n, OPS), np.int32), fb.empty((n, 2), np.int64)
    assert ops.launch(3, 96, dev, dev_wide, fb.to_device(a), fb.to_device(b), fb.to_device(c), -12345, n) is None
    assert (dev.to_host() == host).all() and (dev_wide.to_host() == host_wide).all()
    bits = fb.compile(BIT_OPS, "sm_90a", name="bit_ops.cu").bit_ops
    host = np.zeros((n, 8), np.uint32)
    bits.run_on_host(2, 64, host, a, b, n)
    dev = fb.empty((n, 8), np.uint32)
    assert bits.launch(2, 64, dev, fb.to_device(a), fb.to_device(b), n) is None
    assert (dev.to_host() == host).all()


@pytest.mark.parametrize("body, says", [
    ("__shared__ int t[32]; t[threadIdx.x % 32] = n; __syncthreads(); out[threadIdx.x] = t[0];",
     r"memory of its own|a barrier|ld\.shared|st\.shared"),
    ("out[threadIdx.x] = __shfl_sync(0xffffffff, n, 0);", "a warp shuffle"),
    ("out[threadIdx.x] = (int)(n * 0.5f + 1.25f);", r"uses `(cvt|mul|fma|add)\.[^`]*f32"),
    ("atomicAdd(out, n);", "an atomic"),
    ("assert(n > 0); out[threadIdx.x] = n;", "calls a function that was not inlined"),
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
    with pytest.raises(HostRunFault, match=r"\(k\.cu line 2\): div by zero \(thread \(3, 0, 0\)\).*unspecified"):
        k.run_on_host(1, 8, np.zeros(8, np.int32), 100, 3)


def test_a_store_past_the_array_is_named_and_a_loop_past_the_limits_is_left_to_a_gpu():
    k = _kernel("  out[threadIdx.x * n] = 1;")
    with pytest.raises(HostRunFault, match=r"argument 0, whose array has 32 bytes"):
        k.run_on_host(1, 8, np.zeros(8, np.int32), 2, 0)
    spin = _kernel("  volatile int* v = out;\n  unsigned i = 0;\n  while (i != (unsigned)d) { i += 2; v[0] = i; }")
    ptx = spin.module.ptx
    out = np.zeros(1, np.int32)
    host_ptx.run(ptx, "k", (1, 1, 1), (1, 1, 1), [out, 0, 4])
    assert out[0] == 4
    # Endless, or only long: the host cannot tell, so no verdict (a lab's check is skipped, never passed or failed).
    with pytest.raises(HostRunUnsupported, match="without ending: a long loop, or one that never ends"):
        host_ptx.run(ptx, "k", (1, 1, 1), (1, 1, 1), [out, 0, 3], step_limit=10_000)
    with pytest.raises(HostRunUnsupported, match="without ending"):
        host_ptx.run(ptx, "k", (1, 1, 1), (4, 1, 1), [out, 0, 4000], total_limit=10_000)
    host_ptx.run(ptx, "k", (1, 1, 1), (4, 1, 1), [out, 0, 4000])


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


def test_hand_written_ptx_narrow_signed_values_vectors_halves_and_lanes():
    """Forms NVRTC emits elsewhere: a signed byte loaded into a 64-bit register, a narrowing cvt read back wider, a
    64-bit value split into halves and joined again, %laneid in a 2D block, a misaligned vector store."""
    ptx = """
.visible .entry t(.param .u64 t_param_0, .param .s8 t_param_1)
{
    ld.param.u64 %rd1, [t_param_0];
    ld.param.s8 %rs1, [t_param_1];
    cvt.s64.s16 %rd2, %rs1;
    cvta.to.global.u64 %rd3, %rd1;
    mov.u32 %r1, %tid.y;
    setp.ne.s32 %p1, %r1, 1;
    @%p1 bra $L__done;
    mov.u32 %r2, %tid.x;
    setp.ne.s32 %p2, %r2, 0;
    @%p2 bra $L__done;
    st.global.u64 [%rd3], %rd2;
    cvt.s8.s32 %rs2, 200;
    cvt.s32.s16 %r3, %rs2;
    st.global.u32 [%rd3+8], %r3;
    mov.b64 {%r4, %r5}, 0x0000000700000009;
    mov.b64 %rd4, {%r5, %r4};
    st.global.u64 [%rd3+16], %rd4;
    mov.u32 %r6, %laneid;
    st.global.u32 [%rd3+24], %r6;
    mov.u32 %r7, 010;
    st.global.u32 [%rd3+28], %r7;
$L__done:
    ret;
}
"""
    out = np.zeros(4, np.int64)
    host_ptx.run(ptx, "t", (1, 1, 1), (16, 4, 1), [out, -5])
    assert out[0] == -5                                     # ld.param.s8 then cvt.s64.s16: sign-extended
    assert np.int32(out[1] & 0xffffffff) == -56             # cvt.s8.s32 200, read as s16: -56
    assert out[2] == (9 << 32) | 7                          # halves swapped
    assert out[3] & 0xffffffff == 16 and out[3] >> 32 == 8  # lane of thread (0, 1) in a 16-wide block; octal 010
    bad = ptx.replace("st.global.u64 [%rd3], %rd2;", "st.global.v2.u32 [%rd3+4], {%r1, %r1};")
    with pytest.raises(HostRunFault, match="not a multiple of the access's 8 bytes"):
        host_ptx.run(bad, "t", (1, 1, 1), (16, 4, 1), [np.zeros(4, np.int64), -5])


def test_a_labs_probe_reads_back_on_the_host_or_says_why_it_cannot():
    """course.probe.read_back without a GPU: integer code is run on the host; code the host run does not model comes
    back as a Skipped naming it, so its check is reported skipped, never passed."""
    if fb.needs("sm_90a") is None:
        pytest.skip("this machine launches the probe: test_the_gpu_writes_what_the_host_run_wrote covers the launch")
    from feedbeast.course import probe
    k = _kernel("  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = i * d;")
    out, how = probe.read_back(k, (100,), 100, 3)
    assert isinstance(out, np.ndarray) and (out == 3 * np.arange(100)).all() and "on the host" in str(how)
    assert fb.check(out, 3 * np.arange(100), name="probe").passed
    f = _kernel("  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = (int)ceilf(i * 0.5f * d);")
    out, how = probe.read_back(f, (100,), 100, 3)
    assert isinstance(how, fb.Skipped) and "f32" in str(how) and "needs sm_90a" in str(how), how
    assert isinstance(fb.check(out, np.zeros(100), name="probe", after=how), fb.Skipped)
