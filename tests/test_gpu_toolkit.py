"""The toolkit on a real GPU: launch, shared-memory opt-in, tensor maps, bounded waits, bench.

Every test here skips by name on a machine without the GPU it needs.
"""
import time

import numpy as np
import pytest

import feedbeast as fb

SAXPY = r"""
extern "C" __global__ void saxpy(float* y, const float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void big_smem(float* out, int n) {
  extern __shared__ float buf[];
  for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = float(i);
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = buf[n - 1 - i];
}
extern "C" __global__ void widths(long long* out, long long a, int b, double c) {
  out[0] = a; out[1] = b; out[2] = (long long)c;
}
"""

# One thread waits on an mbarrier whose phase can never complete (it expects 2 arrivals, gets 0).
HANG = r"""
#include <cuda/std/cstdint>
#include <fb/debug.cuh>
extern "C" __global__ void hang(int* out) {
  __shared__ __align__(8) cuda::std::uint64_t bar;
  unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(&bar));
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 2;" :: "r"(a));
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  unsigned long long t0 = fb::globaltimer_ns();
  while (true) {
    unsigned done;
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done) : "r"(a), "r"(0) : "memory");
    if (done) break;
    unsigned long long waited = fb::globaltimer_ns() - t0;
    if (waited > FB_WAIT_TIMEOUT_NS) fb::report_timeout("full", 3, 0, waited);
  }
  out[0] = 1;
}
"""

TMA = r"""
#include <cuda/std/cstdint>
struct alignas(64) TensorMap { unsigned long long v[16]; };
extern "C" __global__ void tma_tile(const __grid_constant__ TensorMap tmap, float* out, int row0, int col0) {
  __shared__ alignas(128) float tile[32][32];
  __shared__ alignas(8) cuda::std::uint64_t bar;
  unsigned b = static_cast<unsigned>(__cvta_generic_to_shared(&bar));
  unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(&tile[0][0]));
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(b));
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(b), "r"(32 * 32 * 4));
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                 :: "r"(s), "l"(&tmap), "r"(col0), "r"(row0), "r"(b) : "memory");
  }
  __syncthreads();
  unsigned done = 0;
  while (!done)
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done) : "r"(b) : "memory");
  for (int i = threadIdx.x; i < 32 * 32; i += blockDim.x) out[i] = tile[i / 32][i % 32];
}
"""


def test_tma_kernel_compiles_to_utmaldg():
    fb.compile(TMA, "sm_90a").expect_sass("UTMALDG", "SYNCS")


def test_launch_and_check_ragged(anygpu):
    mod = fb.compile(SAXPY)
    n = 100_003
    x, y = fb.random(n, seed=1), fb.random(n, seed=2)
    dy = fb.to_device(y)
    assert mod.saxpy.launch((n + 255) // 256, 256, dy, fb.to_device(x), 2.5, n) is None
    fb.check(dy, 2.5 * x.astype(np.float64) + y)


def test_argument_widths_follow_the_kernel_signature(anygpu):
    mod = fb.compile(SAXPY)
    out = fb.empty(3, np.int64)
    mod.widths.launch(1, 1, out, 2**40 + 5, -7, 9.0)
    assert out.to_host().tolist() == [2**40 + 5, -7, 9]
    with pytest.raises(fb.LaunchError, match="takes 4 arguments, got 3"):
        mod.widths.launch(1, 1, out, 1, 2)
    with pytest.raises(fb.LaunchError, match="does not fit a 4-byte"):
        mod.widths.launch(1, 1, out, 1, 2**40, 1.0)


def test_dynamic_shared_memory_above_48k_and_over_the_limit(anygpu):
    mod = fb.compile(SAXPY)
    n = 150 * 1024 // 4
    out = fb.empty(n)
    mod.big_smem.launch(1, 256, out, n, shared=n * 4)
    fb.check(out, np.arange(n - 1, -1, -1, dtype=np.float64))
    too_much = anygpu.smem_per_block_optin + 4
    with pytest.raises(fb.LaunchError, match="use fewer stages or smaller tiles"):
        mod.big_smem.launch(1, 256, out, n, shared=too_much)
    with pytest.raises(fb.LaunchError, match="at most 1024"):
        mod.big_smem.launch(1, 2048, out, n)


def test_tma_load_of_a_ragged_tile_fills_zero_past_the_edge(gpu90):
    rows, cols = 50, 36   # 36 floats = 144 B per row: a multiple of 16 B
    host = fb.random((rows, cols), seed=3)
    a = fb.to_device(host)
    tm = fb.tensor_map(a, (32, 32))
    out = fb.empty((32, 32))
    fb.compile(TMA, "sm_90a").tma_tile.launch(1, 128, tm, out, 32, 16)
    expect = np.zeros((32, 32))
    expect[:rows - 32, :cols - 16] = host[32:, 16:]
    fb.check(out, expect)


def test_a_hung_barrier_wait_reports_in_seconds(anygpu):
    # In a separate process: after a trap, a process cannot use the GPU again.
    t0 = time.perf_counter()
    with pytest.raises(fb.BarrierTimeout, match="barrier 'full' stage 3 for phase parity 0.*separate process"):
        fb.isolated("""
            mod = fb.compile(HANG, debug=True, defines={"FB_WAIT_TIMEOUT_NS": "200000000ull"})
            out = fb.empty(1, np.int32)
            mod.hang.launch(1, 32, out)
            fb.sync()
        """, HANG=HANG)
    assert time.perf_counter() - t0 < 60


def test_bench_and_ceilings(anygpu, tmp_path, monkeypatch):
    monkeypatch.setenv("FEEDBEAST_RESULTS", str(tmp_path))
    copy = fb.ceiling("copy")
    assert copy.gbps > 100   # any GPU of the last decade; the real figure is printed below
    mod = fb.compile(SAXPY)
    n = 1 << 26
    x, y = fb.to_device(fb.random(n, seed=1)), fb.to_device(fb.random(n, seed=2))
    r = fb.bench(lambda: mod.saxpy.launch(n // 256, 256, y, x, 1.0001, n), name="test/saxpy",
                 nbytes=3 * 4 * n, ceiling="copy", sizes={"n": n})
    print(copy, r, sep="\n")
    assert r.pct is not None and r.median_ms > 0 and len(r.times_ms) == 30
    from feedbeast.course import results   # the course keeps the log (feedbeast.hooks.on_bench)
    rec = results.load(tmp_path / anygpu.slug / "bench.jsonl")
    assert [x["name"] for x in rec] == ["ceiling/copy", "test/saxpy"]
    assert rec[1]["gpu"] == anygpu.name and rec[1]["sizes"] == {"n": n}


def test_bench_keeps_the_hosts_time_out_of_the_timed_runs(anygpu):
    """2 ms of host time before each launch of a kernel of a few microseconds: the times are the kernel's."""
    mod = fb.compile(SAXPY)
    n = 1 << 20
    x, y = fb.to_device(fb.random(n, seed=1)), fb.to_device(fb.random(n, seed=2))

    def slow_host():
        time.sleep(0.002)
        mod.saxpy.launch(n // 256, 256, y, x, 1.0001, n)
    r = fb.bench(slow_host, name="test/slow-host", nbytes=3 * 4 * n, record=False)
    print(r)
    assert r.host_hidden and r.host_us >= 2000
    assert r.median_ms < 0.5        # without the hold each run would measure the 2 ms of sleep


def test_cublas_gemm_is_right_and_rated(anygpu):
    if not fb.ceilings.cublas_available():
        pytest.skip("skipped: needs cuBLAS, none found")
    n = 300
    a, b = fb.random((n, n + 1), fb.bfloat16, seed=4), fb.random((n + 1, n - 2), fb.bfloat16, seed=5)
    c = fb.empty((n, n - 2), np.float32)
    fb.cublas_gemm(fb.to_device(a), fb.to_device(b), c, mode="bf16")
    fb.check(c, a.astype(np.float64) @ b.astype(np.float64), tol=1e-3)
    print(fb.ceiling("bf16", 4096))


CLUSTER = r"""
extern "C" __global__ void cluster_rank(int* out) {
  unsigned rank, size;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(size));
  if (threadIdx.x == 0) out[blockIdx.x] = int(rank * 100 + size);
}
"""


def test_cluster_launch(gpu90):
    mod = fb.compile(CLUSTER, "sm_90a")
    out = fb.empty(8, np.int32)
    mod.cluster_rank.launch(8, 32, out, cluster=(2, 1, 1))
    assert out.to_host().tolist() == [2, 102] * 4
    with pytest.raises(fb.LaunchError, match="not a multiple of cluster"):
        mod.cluster_rank.launch(7, 32, out, cluster=(2, 1, 1))


def test_a_kernel_for_another_arch_is_skipped_by_name(anygpu):
    other = "sm_100a" if anygpu.cc != (10, 0) else "sm_90a"
    mod = fb.compile(SAXPY, other)
    y = fb.to_device(np.ones(4, np.float32))
    r = mod.saxpy.launch(1, 32, y, y, 1.0, 4)
    assert isinstance(r, fb.Skipped) and f"needs {other}, this machine has {anygpu.arch}" in str(r)
    assert isinstance(fb.check(r, np.ones(4)), fb.Skipped)


def test_an_illegal_address_is_a_kernel_fault_and_later_use_says_why(anygpu):
    with pytest.raises(fb.KernelFault, match="CUDA_ERROR_ILLEGAL_ADDRESS.*separate process"):
        fb.isolated("""
            bad = fb.compile('extern "C" __global__ void wild(float* p) { p[1ll << 40] = 1.f; }')
            bad.wild.launch(1, 1, fb.empty(1))
            try:
                fb.sync()
            except fb.KernelFault:
                fb.empty(4)      # the second use names the first failure
        """)


def test_isolated_returns_output_and_passes_values():
    assert fb.isolated("print(x + 1)", x=41).strip() == "42"
    with pytest.raises(fb.CheckFailed, match="shape"):
        fb.isolated("fb.check(np.ones(3), np.ones(4))")


def test_a_tensor_map_keeps_its_array_alive(gpu90):
    tm = fb.tensor_map(fb.to_device(fb.random((64, 32), seed=0)), (32, 32))
    assert tm.array is not None and tm.array.on_gpu


# ---- checks that run before any skip, on every machine ---------------------------------------------
LAUNCH_CHECKS = r"""
#include <cuda_bf16.h>
struct alignas(64) TensorMap { unsigned long long v[16]; };
extern "C" __global__ void takes(float* y, const float* x, float a, int n) { if (n) y[0] = a * x[0]; }
extern "C" __global__ void with_map(const __grid_constant__ TensorMap t, float* y) { y[0] = float(t.v[2]); }
extern "C" __global__ void __launch_bounds__(256, 1) bounded(float* y) { y[threadIdx.x] = 1.f; }
extern "C" __global__ void counts(int* c, const __nv_bfloat16* h, const unsigned char* codes) { c[0] = codes[0]; }
extern "C" __global__ void static_smem(float* y) {
  __shared__ float s[12 * 1024];
  s[threadIdx.x] = 1.f; __syncthreads(); y[threadIdx.x] = s[(threadIdx.x + 1) % 256];
}
"""


def test_parameters_come_from_the_cubin_without_a_gpu():
    mod = fb.compile(LAUNCH_CHECKS, "sm_90a")
    assert [size for _, size in mod.takes.params] == [8, 8, 4, 4]
    assert [size for _, size in mod.with_map.params] == [128, 8]
    from feedbeast.compile import kernel_max_threads
    assert kernel_max_threads(mod.cubin, "bounded") == 256 and kernel_max_threads(mod.cubin, "takes") is None


@pytest.mark.parametrize("call, message", [
    (lambda m, y: m.takes.launch(1, 32, y, y, 1.0), "takes 4 arguments, got 3"),
    (lambda m, y: m.takes.launch(1, 32, y, y, 1.0, 4, 5), "takes 4 arguments, got 5"),
    (lambda m, y: m.takes.launch(1, 32, y, np.ones(4, np.float32), 1.0, 4), "numpy array lives in host"),
    (lambda m, y: m.takes.launch(1, 32, y, y, 1.0, 2**40), "does not fit a 4-byte"),
    (lambda m, y: m.takes.launch(1, 32, y, y, "a", 4), "cannot pass a str"),
    (lambda m, y: m.takes.launch(1, 32, 7, y, 1.0, 4), None),       # an int for a pointer is legal (an address)
    (lambda m, y: m.takes.launch(1, 32, y, y, np.float64(1.0), 4), "float64 is 8 B but the parameter is 4 B"),
    (lambda m, y: m.takes.launch(1, 2048, y, y, 1.0, 4), "at most 1024"),
    (lambda m, y: m.takes.launch(1, (1, 1, 65), y, y, 1.0, 4), "dimension z is 65"),
    (lambda m, y: m.takes.launch((1, 70000), 32, y, y, 1.0, 4), "dimension y is 70000"),
    (lambda m, y: m.takes.launch(0, 32, y, y, 1.0, 4), "positive integer sizes"),
    (lambda m, y: m.takes.launch(1.5, 32, y, y, 1.0, 4), "positive integer sizes"),
    (lambda m, y: m.bounded.launch(1, 512, y), "at most 256 \\(its __launch_bounds__\\)"),
    (lambda m, y: m.takes.launch(1, 32, y, y, 1.0, 4, shared=228 * 1024), "allows 232448 B per block"),
    (lambda m, y: m.static_smem.launch(1, 256, y, shared=180 * 1024), "49152 B static"),
    (lambda m, y: m.takes.launch(7, 32, y, y, 1.0, 4, cluster=2), "not a multiple of cluster"),
    (lambda m, y: m.takes.launch(16, 32, y, y, 1.0, 4, cluster=16), "portable cluster size"),
    (lambda m, y: m.takes.launch(1, 32, y, y, 1.0, 4, shared=-1), "shared=-1"),
    (lambda m, y: m.with_map.launch(1, 32, y, y), "a device array is a pointer \\(8 B\\) but the parameter is 128 B"),
    # a float for `int n` (n / 4 for n // 4) would be read as the float's bits: a huge count
    (lambda m, y: m.takes.launch(1, 32, y, y, 1.0, 4096 / 4), r"argument 3 \(int n\): 1024.0 is a float and the "
                                                               r"parameter an integer: pass an int"),
    # a float64 array for `const float* x` would be read as halves of its numbers
    (lambda m, y: m.takes.launch(1, 32, y, fb.empty(4, np.float64), 1.0, 4),
     r"argument 1 \(const float\* x\): a float64 array \(8 B elements\) for a pointer to float \(4 B\): pass an "
     r"array of float32"),
    (lambda m, y: m.takes.launch(1, 32, fb.empty(8, fb.bfloat16), y, 1.0, 4), r"a bfloat16 array \(2 B elements\)"),
    # the same size, the other kind of number: an int32 array for a float*, a float32 one for an int*, an int16 one
    # for a bf16*
    (lambda m, y: m.takes.launch(1, 32, fb.empty(8, np.int32), y, 1.0, 4),
     r"argument 0 \(float\* y\): an int32 array holds integers and the parameter points to float: the kernel would "
     r"read their bits as floats: pass an array of float32 \(an input: x.astype\(...\) on the host, then "
     r"fb.to_device; an output: fb.empty\(shape, that type\)\)"),
    (lambda m, y: m.counts.launch(1, 32, y, fb.empty(8, fb.bfloat16), fb.empty(8, np.uint8)),
     r"argument 0 \(int\* c\): a float32 array holds floating-point numbers .* as integers: pass an array of int32"),
    (lambda m, y: m.counts.launch(1, 32, fb.empty(8, np.int32), fb.empty(8, np.int16), fb.empty(8, np.uint8)),
     r"argument 1 \(const __nv_bfloat16\* h\): an int16 array holds integers"),
    (lambda m, y: m.counts.launch(1, 32, fb.empty(8, np.uint32), fb.empty(8, fb.bfloat16), fb.empty(8, np.uint8)),
     None),                                                     # signed or not: both integers
    (lambda m, y: m.counts.launch(1, 32, fb.empty(8, np.int32), fb.empty(8, np.float16), fb.empty(8, np.int8)),
     None),                                                     # a half array for a bf16*: not told apart; bytes alike
])
def test_launch_arguments_are_checked_before_the_skip(call, message):
    mod = fb.compile(LAUNCH_CHECKS, "sm_90a")
    y = fb.empty(256)   # a placeholder with no GPU: a launch that passes every check is skipped there
    if message is None:
        r = call(mod, y) if fb.needs("sm_90a") is not None else None
        assert r is None or isinstance(r, fb.Skipped)
        return
    with pytest.raises(fb.LaunchError, match=message):
        call(mod, y)


def test_a_python_int_for_a_float_parameter_is_passed_as_that_float():
    """Before, 2 for `float a` went in as the int's bits (2.8e-45); the declaration says float, so 2.0 goes in."""
    from feedbeast.memory import DeviceArray
    mod = fb.compile(LAUNCH_CHECKS, "sm_90a")
    assert mod.takes.declared == ["float* y", "const float* x", "float a", "int n"]
    y = DeviceArray(4, np.float32, 0x7000_0000, owner=False)        # an address: nothing is launched
    _buf, ptrs = mod.takes._pack((y, y, 2, 4))
    import ctypes
    assert ctypes.c_float.from_address(ptrs[2]).value == 2.0 and ctypes.c_int.from_address(ptrs[3]).value == 4
    assert mod.with_map.declared == ["const __grid_constant__ TensorMap t", "float* y"]


def test_clusters_need_sm90():
    mod = fb.compile(LAUNCH_CHECKS, "sm_80")
    with pytest.raises(fb.LaunchError, match="clusters need sm_90"):
        mod.takes.launch(2, 32, fb.empty(4), fb.empty(4), 1.0, 4, cluster=2)
    with pytest.raises(fb.LaunchError, match="allows 166912 B per block"):
        mod.takes.launch(1, 32, fb.empty(4), fb.empty(4), 1.0, 4, shared=170 * 1024)


HEAVY = r"""
extern "C" __global__ void heavy(float* o, const float* x, int n) {
  float a[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) a[i] = x[threadIdx.x + i * n];
  float s = 0;
#pragma unroll
  for (int j = 0; j < 32; ++j)
#pragma unroll
    for (int i = 0; i < 32; ++i) s += a[i] * a[(i + j) % 32];
  o[threadIdx.x] = s;
}
"""


def test_options_reach_nvrtc():
    free = fb.compile(HEAVY, "sm_90a").resources["heavy"]
    capped = fb.compile(HEAVY, "sm_90a", options=["--maxrregcount=16"]).resources["heavy"]
    print(f"registers: {free.registers} free, {capped.registers} with --maxrregcount=16 ({capped.spills} B spilled)")
    assert capped.registers < free.registers and capped.registers <= 24   # ptxas's floor on sm_90 is 24
    assert capped.spills > 0
    same = fb.compile(HEAVY, "sm_90a", options="--maxrregcount=16").resources["heavy"]   # one string, split
    assert same == capped


def test_an_unknown_option_is_a_compile_error():
    with pytest.raises(fb.CompileError, match="refused an option.*--bogus-flag"):
        fb.compile(HEAVY, "sm_90a", options=["--bogus-flag"])
    with pytest.raises(fb.CompileError, match="as strings"):
        fb.compile(HEAVY, "sm_90a", options=[16])


def test_bind_checks_once_and_launches_again():
    mod = fb.compile(SAXPY)
    y = fb.empty(1024)
    with pytest.raises(fb.LaunchError, match="takes 4 arguments, got 3"):
        mod.saxpy.bind(4, 256, y, y, 1.0)
    again = mod.saxpy.bind(4, 256, y, fb.empty(1024), 2.0, 1024)
    if fb.gpu() is None:
        assert isinstance(again(), fb.Skipped)
        return
    x, y0 = fb.random(1000, seed=7), fb.random(1000, seed=8)
    dy = fb.to_device(y0)
    again = mod.saxpy.bind(4, 256, dy, fb.to_device(x), 2.0, 1000)
    assert again() is None and again() is None        # two launches: y = 2x + (2x + y0)
    fb.check(dy, 4 * x.astype(np.float64) + y0)


def test_a_recorded_launch_is_made_again_with_the_same_bytes(anygpu):
    """fb.profile's child launches what the chapter's function launched: the same build, configuration and data
    (here replayed in this process, without ncu): two more runs there give, bit for bit, what two more runs here give."""
    from feedbeast import profiling
    mod = fb.compile(SAXPY)
    n = 1000
    x, y = fb.to_device(fb.random(n, seed=1)), fb.to_device(fb.random(n, seed=2))
    run = lambda: mod.saxpy.launch(-(-n // 256), 256, y, x, 1.5, n)
    spec = profiling.recorded_launches(run)
    assert [(k, g, b) for _, k, g, b, *_ in spec["launches"]] == [("saxpy", (4, 1, 1), (256, 1, 1))]
    assert len(spec["buffers"]) == 2 and np.array_equal(spec["buffers"][0], y.to_host())   # bytes after the run
    spec["rounds"] = 2
    bufs = []
    real = fb.memory.to_device
    try:
        fb.memory.to_device = lambda a: bufs.append(real(a)) or bufs[-1]
        profiling.replay(spec)
    finally:
        fb.memory.to_device = real
    run()
    run()
    there, here = bufs[0].to_host(), y.to_host()
    assert not np.array_equal(there, spec["buffers"][0]) and np.array_equal(there, here)


def test_profile_reads_the_counters_of_a_bound_launch(anygpu):
    mod = fb.compile(SAXPY)
    n = 1 << 22
    x, y = fb.to_device(fb.random(n, seed=1)), fb.to_device(fb.random(n, seed=2))
    run = mod.saxpy.bind(n // 256, 256, y, x, 1.0001, n)
    p = fb.profile(run, name="test/saxpy/profiled", launch_skip=1, record=False)
    if isinstance(p, fb.Skipped):
        pytest.skip(str(p))
    print(p)
    assert p.kernel.startswith("saxpy") and p.values["dram_bytes"] > 0 and p.values["duration"] > 0


TORCH_BF16 = r"""
#include <cuda_bf16.h>
extern "C" __global__ void twice_bf16(__nv_bfloat16* y, const __nv_bfloat16* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __float2bfloat16(2.f * __bfloat162float(x[i]));
}
"""


def test_gpu_pytorch_bf16_tensors_are_launched_checked_and_carried(anygpu):
    """PyTorch gives no `__cuda_array_interface__` for bf16 tensors (and older versions raise KeyError for it): a
    launch takes them all the same (their kind checked against the pointer's), fb.check reads them, on the GPU and
    in host memory, and a child process (fb.profile's replay) gets their bytes; one that requires grad is refused
    with what to do."""
    torch = pytest.importorskip("torch")
    from feedbeast import profiling
    mod = fb.compile(TORCH_BF16)
    n = 1000
    x = torch.randn(n, device="cuda").to(torch.bfloat16)
    y = torch.full((n,), float("nan"), device="cuda", dtype=torch.bfloat16)
    assert mod.twice_bf16.launch(-(-n // 256), 256, y, x, n) is None
    ref = 2 * x.float().cpu().numpy().astype(np.float64)
    assert fb.check(y, ref, name="torch bf16 on the GPU").passed
    assert fb.check(y.cpu(), ref, name="torch bf16 in host memory").passed
    with pytest.raises(fb.LaunchError, match="holds integers"):
        mod.twice_bf16.launch(4, 256, torch.zeros(n, device="cuda", dtype=torch.int16), x, n)
    with pytest.raises(TypeError, match=r"requires grad: pass t\.detach\(\)"):
        mod.twice_bf16.launch(4, 256, y, x.clone().requires_grad_(), n)
    spec = profiling.recorded_launches(mod.twice_bf16.bind(-(-n // 256), 256, y, x, n))
    assert spec["buffers"][0].dtype == fb.bfloat16 and spec["buffers"][0].shape == (n,)
    assert np.array_equal(spec["buffers"][0].view(np.uint16), y.cpu().view(torch.int16).numpy().view(np.uint16))


def test_a_mistyped_toolkit_name_gets_the_names_closest_to_it():
    with pytest.raises(AttributeError, match=r"has no attribute 'emtpy'; did you mean fb\.empty\?"):
        fb.emtpy((4,), np.float32)
    with pytest.raises(AttributeError, match=r"has no attribute 'zzz'$"):
        fb.zzz
    assert not hasattr(fb, "nope") and hasattr(fb, "empty")


def test_calling_the_tensormap_module_names_the_function():
    with pytest.raises(TypeError, match=r"the function is fb\.tensor_map\(\.\.\.\)"):
        fb.tensormap(fb.empty((64, 64), np.float32), box=(32, 32))
