"""compile(): cubins without a GPU, resources, SASS, errors that show the line, the cache."""
import dataclasses
import re
import sys

import numpy as np
import pytest

import feedbeast as fb
from feedbeast.compile import kernel_names, parse_ptxas_log

CP_ASYNC = r"""
#include <cuda/std/cstdint>
extern "C" __global__ void stage(const float* __restrict__ in, float* out, int n) {
  __shared__ __align__(16) float tile[4 * 128];
  int i = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
  unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(tile + threadIdx.x * 4));
  int bytes = i + 4 <= n ? 16 : 0;   // zero-fill past the end
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(dst), "l"(in + (bytes ? i : 0)), "r"(bytes));
  asm volatile("cp.async.commit_group;");
  asm volatile("cp.async.wait_group 0;" ::: "memory");
  __syncthreads();
  if (i < n) out[i] = 2.f * tile[threadIdx.x * 4];
}
extern "C" __global__ void other(int* x) { x[threadIdx.x] = threadIdx.x; }
"""


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a", "sm_100a"])
def test_compiles_for_every_target_without_a_gpu(arch):
    mod = fb.compile(CP_ASYNC, arch)
    assert mod.cubin[:4] == b"\x7fELF"
    assert sorted(mod.kernel_names) == ["other", "stage"]
    r = mod.resources["stage"]
    assert r.registers > 0 and r.shared_static == 4 * 128 * 4 and r.spills == 0
    mod.expect_sass("LDGSTS", "LDGDEPBAR", "DEPBAR", kernel="stage")


def test_expect_sass_names_the_missing_instruction():
    mod = fb.compile(CP_ASYNC, "sm_90a")
    with pytest.raises(fb.SassMismatch, match="missing HGMMA, UTMALDG"):
        mod.expect_sass("LDGSTS", "HGMMA", "UTMALDG")
    # what to write for it, where the course has a wrapper (labs 04 and 05: a missing load, commit or wait)
    with pytest.raises(fb.SassMismatch, match=r"missing HGMMA, UTMALDG\n  \(in the source: HGMMA from wgmma.mma_async "
                                              r"\(fb::wgmma::mma\); UTMALDG from cp.async.bulk.tensor, a TMA load "
                                              r"\(fb::tma::load_2d\)\)"):
        mod.expect_sass("HGMMA", "UTMALDG")
    with pytest.raises(fb.SassMismatch, match="should not contain LDGSTS"):
        mod.expect_sass(kernel="stage", forbid=("LDGSTS",))
    hist = mod.histogram("stage")
    assert hist["LDGSTS.E.BYPASS.128.ZFILL"] + hist["LDGSTS.E.BYPASS.128"] >= 1
    with pytest.raises(fb.SassMismatch, match=r"missing ldgsts\n  \(SASS opcodes are upper case: LDGSTS is there\)"):
        mod.expect_sass("ldgsts", kernel="stage")


SCALAR_COPY = r"""
extern "C" __global__ void copy(const float* __restrict__ src, float* __restrict__ dst, long long n) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) dst[i] = src[i];
}
"""


def test_a_missing_wide_access_names_its_width_not_the_access():
    # lab 00 asks for 16-byte accesses; a float loop has global loads and stores, 4 bytes each
    mod = fb.compile(SCALAR_COPY, "sm_90a")
    with pytest.raises(fb.SassMismatch) as e:
        mod.expect_sass("LDG.E.128", "STG.E.128", kernel="copy")
    text = str(e.value)
    assert ("LDG.E.128 from a 16-byte load from global memory: a float4 or int4 access, 16-byte aligned "
            "(LDG.E is 4 bytes); STG.E.128 from a 16-byte store") in text, text
    assert "the SASS has them at another width: " in text and "STG.E (4 bytes)" in text, text
    src = fb.sass.source_of
    assert src("LDS.64").startswith("an 8-byte load from shared memory: a float2")
    assert src("STG.E.U8").startswith("a 1-byte store to global memory") and "(STG.E is 4 bytes)" in src("STG.E.U8")
    assert src("LDG.E.S16").startswith("a 2-byte load from global memory")
    assert src("LDG.E") == "a load from global memory"                 # no suffix: no width said
    assert src("LDGSTS.E.BYPASS.128") == fb.sass.SOURCE_OF["LDGSTS"]   # a cp.async, not an ordinary load
    assert src("LDSM.16.M88.4") is None                                 # ldmatrix: .16 is not a width


def test_sass_text_and_highlight():
    mod = fb.compile(CP_ASYNC, "sm_90a")
    text = mod.sass("stage")
    assert text.startswith("// stage") and "LDGSTS" in text and "// other" not in text
    hl = fb.sass.highlight(text, "LDGSTS")
    assert ">> " in hl and "LDGSTS" in hl


def test_sass_comes_from_nvdisasm_json_as_instructions():
    mod = fb.compile(CP_ASYNC, "sm_90a")
    insns = fb.sass.instructions(mod)
    assert sorted(insns) == ["other", "stage"]
    stage = insns["stage"]
    assert [i.opcode for i in stage] == fb.sass.opcodes(mod.sass("stage"))     # the printed text reads back the same
    assert [i.offset for i in stage] == [16 * k for k in range(len(stage))]
    copy = next(i for i in stage if i.opcode.startswith("LDGSTS"))
    assert copy.operands[0].startswith("[") and "[" in copy.operands[1], copy   # the shared address, the global one
    assert any(i.predicate.startswith("@") for i in stage)
    assert fb.sass.histogram(mod, "stage") == mod.histogram("stage")
    with pytest.raises(fb.FeedbeastError, match="no kernel 'nope'"):
        fb.sass.instructions(mod, "nope")


def test_a_disassembly_is_read_from_disk_by_the_next_process(tmp_path, monkeypatch):
    """nvdisasm runs once per cubin and nvdisasm binary: a later process (here: the in-process cache cleared)
    reads the JSON kept under FEEDBEAST_CACHE/sass and gets the same instructions."""
    monkeypatch.setenv("FEEDBEAST_CACHE", str(tmp_path))
    mod = fb.compile(CP_ASYNC, "sm_90a")
    fb.sass._disassemble.cache_clear()
    first = fb.sass.instructions(mod)
    kept = list((tmp_path / "sass").glob("*.json"))
    assert len(kept) == 1 and kept[0].read_text().lstrip().startswith("["), kept
    fb.sass._disassemble.cache_clear()
    monkeypatch.setattr(fb.sass, "_run", lambda *a: pytest.fail("nvdisasm ran again for a kept disassembly"))
    assert fb.sass.instructions(mod) == first
    fb.sass._disassemble.cache_clear()


@pytest.mark.parametrize("json_operands, operands", [
    ("R1,c[0x0][0x28]", ("R1", "c[0x0][0x28]")),                # a constant bank is one operand
    ("URZ[UR10],UR4", ("URZ", "[UR10]", "UR4")),                # the JSON drops the comma before an address
    ("[UR16][UR10]", ("[UR16]", "[UR10]")),                     # two addresses in a row
    ("R2,desc[UR4][R2.64]", ("R2", "desc[UR4][R2.64]")),        # a descriptor and its address are one
    ("", ()),
])
def test_nvdisasm_operands_split_as_cuobjdump_prints_them(json_operands, operands):
    assert fb.sass._split_operands(json_operands) == operands


def test_initial_value_reads_a_device_variable_out_of_the_cubin():
    mod = fb.compile(r"""
__device__ const int table[4] = {3, -1, 4, 1};
__device__ int zeros[8];
extern "C" __global__ void use(int* out) { out[threadIdx.x] = table[threadIdx.x % 4] + zeros[threadIdx.x % 8]; }
""", "sm_90a")
    assert fb.cubin.initial_value(mod, "table", np.int32).tolist() == [3, -1, 4, 1]
    assert fb.cubin.initial_value(mod, "zeros", np.int32, (2, 4)).tolist() == [[0] * 4] * 2
    with pytest.raises(fb.FeedbeastError, match="no symbol 'missing'"):
        fb.cubin.initial_value(mod, "missing", np.int32)


def test_compile_error_shows_the_failing_line():
    bad = CP_ASYNC.replace("2.f * tile", "2.f * tiles")
    with pytest.raises(fb.CompileError) as e:
        fb.compile(bad, "sm_90a", name="lab.cu")
    msg = str(e.value)
    assert "lab.cu:12" in msg and 'identifier "tiles" is undefined' in msg
    assert ">   12 |   if (i < n) out[i] = 2.f * tiles" in msg
    assert e.value.diagnostics[0]["line"] == 12


def test_a_ptxas_error_names_the_source_line_not_the_ptx_line():
    """ptxas reports `ptx input, line 34`, a line of PTX nobody sees; the error names the cell's line (from the PTX's
    .loc directives), and for an instruction of a header inlined into the cell, the cell's call and the header line."""
    src = ('#include <fb/setmaxnreg.cuh>\n'
           'extern "C" __global__ void __launch_bounds__(256, 1) k(float* x) {\n'
           '  x[threadIdx.x] = 1.0f;\n'
           '  if (threadIdx.x < 128) fb::setmaxnreg_inc<300>();\n'
           '  asm volatile("bogus.op %0;" :: "r"(threadIdx.x));\n'
           '}\n')
    with pytest.raises(fb.CompileError) as e:
        fb.compile(src, "sm_90a", name="lab.cu", use_cache=False)
    text = str(e.value)
    assert "lab.cu:4: error: ptxas: Argument 1 of instruction 'setmaxnreg.inc'" in text, text
    assert "(in fb/setmaxnreg.cuh line" in text and "inlined here)" in text, text
    assert "lab.cu:5: error: ptxas: Unknown modifier '.op'" in text, text
    assert ">    4 |   if (threadIdx.x < 128) fb::setmaxnreg_inc<300>();" in text, text
    assert "ptx input, line" not in text, text
    assert "ptx input, line" in e.value.log        # the compiler's own log is kept whole


def test_unknown_arch_is_refused_with_the_accepted_list():
    with pytest.raises(fb.FeedbeastError, match="unknown arch 'sm_91'.*sm_90a"):
        fb.compile(CP_ASYNC, "sm_91")


def test_cache_returns_the_same_cubin_and_defines_change_the_key(tmp_path, monkeypatch):
    monkeypatch.setenv("FEEDBEAST_CACHE", str(tmp_path))
    a = fb.compile(CP_ASYNC, "sm_90a")
    assert len(list((tmp_path / "cubin").glob("*.cubin"))) == 1
    b = fb.compile(CP_ASYNC, "sm_90a")
    assert a.cubin == b.cubin and b.resources == a.resources
    fb.compile(CP_ASYNC, "sm_90a", defines={"X": 1})
    assert len(list((tmp_path / "cubin").glob("*.cubin"))) == 2


def test_processes_compiling_at_once_all_see_the_resources(tmp_path):
    """make sanitize --jobs: a process that finds the cubin in the cache must find its ptxas log too."""
    import subprocess
    import sys
    code = ("import feedbeast as fb, sys; m = fb.compile(sys.argv[1], 'sm_90a', defines={'X': 7}); "
            "print(sorted(m.resources))")
    env = dict(__import__("os").environ, FEEDBEAST_CACHE=str(tmp_path))
    procs = [subprocess.Popen([sys.executable, "-c", code, CP_ASYNC], env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(6)]
    outs = [p.communicate(timeout=300)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs) and len(set(outs)) == 1 and outs[0] != "[]", outs
    assert not list((tmp_path / "cubin").glob("*.tmp"))


def test_debug_build_keeps_the_defines_and_bounds_the_waits():
    src = "extern \"C\" __global__ void k(int* o) {\n#ifdef FB_DEBUG\n  *o = X + 1;\n#else\n  *o = X;\n#endif\n}\n"
    m = fb.compile(src, "sm_90a", defines={"X": 7}, name="k.cu")
    d = m.debug_build()
    assert (d.debug, d.defines, d.name, m.debug) == (True, {"X": 7}, "k.cu", False)
    assert d.cubin != m.cubin and d.debug_build().cubin == d.cubin


def test_a_cached_cubin_without_its_log_is_compiled_again(tmp_path, monkeypatch):
    monkeypatch.setenv("FEEDBEAST_CACHE", str(tmp_path))
    first = fb.compile(CP_ASYNC, "sm_90a", defines={"Y": 3})
    (log,) = (tmp_path / "cubin").glob("*.log")
    log.write_text("")                       # as if another process had not finished writing it
    again = fb.compile(CP_ASYNC, "sm_90a", defines={"Y": 3})
    assert again.resources == first.resources and set(again.kernel_names) <= set(again.resources)
    assert "Compiling entry function" in log.read_text()


def test_nvrtc_own_cache_is_off_so_every_compile_has_its_report(tmp_path, monkeypatch):
    """An NVRTC 12.9+ cache hit returns an empty log; without the report a resources lookup fails."""
    from cuda.core import ProgramOptions
    fbc = sys.modules["feedbeast.compile"]
    seen = []

    def spy(**kw):
        seen.append(kw)
        return ProgramOptions(**kw)
    import cuda.core
    monkeypatch.setattr(cuda.core, "ProgramOptions", spy)
    monkeypatch.setenv("FEEDBEAST_CACHE", str(tmp_path))
    m = fb.compile(CP_ASYNC, "sm_90a", defines={"NO_CACHE": 1})
    assert seen and (seen[-1]["no_cache"] is True) == (fbc.nvrtc_version() >= (12, 9))
    assert set(m.kernel_names) <= set(m.resources)


def test_a_log_without_resources_warns_by_kernel_name(tmp_path, monkeypatch):
    fbc = sys.modules["feedbeast.compile"]
    real = fbc._nvrtc
    monkeypatch.setenv("FEEDBEAST_CACHE", str(tmp_path))
    monkeypatch.setattr(fbc, "_nvrtc", lambda *a: (real(*a)[0], ""))   # NVRTC's log comes back empty
    with pytest.warns(UserWarning, match="no resource report for"):
        m = fb.compile(CP_ASYNC, "sm_90a", defines={"EMPTY_LOG": 1})
    assert not m.resources


def test_ptxas_log_parser():
    log = ("ptxas info    : Compiling entry function 'k' for 'sm_90a'\n"
           "ptxas info    : Function properties for k\n"
           "    24 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
           "ptxas info    : Used 168 registers, used 1 barriers, 1024 bytes smem, 400 bytes cmem[0]\n")
    r = parse_ptxas_log(log)["k"]
    assert (r.registers, r.stack, r.spill_stores, r.spill_loads, r.shared_static, r.barriers) == \
        (168, 24, 8, 12, 1024, 1)


LOCAL_ARRAY = r"""
extern "C" __global__ void scale(const float* __restrict__ x, float* y, int k) {
  float acc[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) acc[i] = x[threadIdx.x * 16 + i];
#pragma unroll UNROLL
  for (int i = 0; i < 16; ++i) acc[i] *= 2.f + k;
#pragma unroll
  for (int i = 0; i < 16; ++i) y[threadIdx.x * 16 + i] = acc[i];
}
"""


def test_local_memory_says_spilled_registers_from_an_array_on_the_stack():
    # lab 07's stage_slab under `#pragma unroll 1`: acc[i] with a run-time i, a stack frame and no spills
    mod = fb.compile(LOCAL_ARRAY, "sm_90a", defines={"UNROLL": 1})
    res = mod.resources["scale"]
    assert res.stack > 0 and res.spills == 0, res
    with pytest.raises(fb.CheckFailed) as e:
        mod.expect_no_local_memory("scale", spills_hint="not said: nothing spilled")
    text = str(e.value)
    assert text.startswith(f"scale uses local memory: a {res.stack} B stack frame and no spills: a local array is "
                           "indexed by a value the compiler cannot resolve at compile time"), text
    assert "unroll the loops that index it" in text and "spilled" not in text and "not said" not in text, text
    # unrolled, every index is a constant: the array lives in registers
    unrolled = fb.compile(LOCAL_ARRAY, "sm_90a", defines={"UNROLL": 16})
    assert unrolled.expect_no_local_memory("scale") == unrolled.resources["scale"]
    assert unrolled.resources["scale"].local_memory == ""
    # spill stores or loads: registers ran out (the lab's own advice follows)
    spilled = parse_ptxas_log("ptxas info    : Function properties for k\n"
                              "    24 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
                              "ptxas info    : Used 255 registers, used 1 barriers\n")["k"]
    assert spilled.local_memory.startswith("registers spilled (8 B spill stores, 12 B spill loads): the kernel "
                                           "keeps more values live than the 255 registers each thread has")
    assert "array" not in spilled.local_memory
    log = ("ptxas info    : Function properties for scale\n    24 bytes stack frame, 8 bytes spill stores, "
           "12 bytes spill loads\nptxas info    : Used 255 registers, used 1 barriers\n")
    faked = dataclasses.replace(mod, log=log)
    with pytest.raises(fb.CheckFailed, match=r"^scale uses local memory: registers spilled .*\(__launch_bounds__, "
                                             r"setmaxnreg\)\. Did a consumer lose its setmaxnreg_inc\? \(255 registers"):
        faked.expect_no_local_memory("scale", spills_hint="Did a consumer lose its setmaxnreg_inc?")


def test_kernel_names_rejects_non_elf():
    with pytest.raises(fb.FeedbeastError):
        kernel_names(b"not a cubin")


def test_unknown_kernel_name_lists_the_real_ones():
    mod = fb.compile(CP_ASYNC, "sm_90a")
    with pytest.raises(fb.FeedbeastError, match="has: .*stage"):
        mod.kernel("stag")


def test_cccl_and_our_headers_are_on_the_include_path():
    src = r"""
    #include <cuda/ptx>
    #include <cuda/barrier>
    #include <cuda_bf16.h>
    #include <fb/debug.cuh>
    extern "C" __global__ void k(__nv_bfloat16* x) { x[threadIdx.x] = __float2bfloat16(1.0f); }
    """
    assert fb.compile(src, "sm_90a").kernel_names == ["k"]


def test_magic_compiles_a_cell_into_the_namespace(capsys):
    from feedbeast.magic import cuda_cell
    ns = {"stages": 3}
    cuda_cell("--arch sm_90a --name m -D STAGES={stages}",
              'extern "C" __global__ void ring(int* x) { x[0] = STAGES; }', ns)
    assert isinstance(ns["m"], fb.Module) and isinstance(ns["ring"], fb.Kernel)
    out = capsys.readouterr().out
    assert "compiled for sm_90a" in out and "ring" in out


def test_a_cell_that_no_longer_compiles_unbinds_what_it_compiled_before(capsys):
    """A check run after a failed compile must not test the kernel of the run before: the cell's module and
    kernels are bound to a placeholder whose every use says the cell did not compile."""
    from feedbeast.magic import NotCompiled, cuda_cell
    ns = {}
    cuda_cell("--name lab", 'extern "C" __global__ void __launch_bounds__(32) ring(int* x) { x[0] = 1; }', ns)
    assert isinstance(ns["ring"], fb.Kernel)
    with pytest.raises(fb.CompileError):
        cuda_cell("--name lab", 'extern "C" __global__ void __launch_bounds__(32) ring(int* x) { x[0] = 1 }', ns)
    assert isinstance(ns["lab"], NotCompiled) and isinstance(ns["ring"], NotCompiled)
    for use in (lambda: ns["lab"].expect_sass("STG"), lambda: ns["ring"].launch(1, 32, None)):
        with pytest.raises(fb.CompileError, match=r"the last run of the `%%cuda --name lab` cell did not compile"):
            use()
    cuda_cell("--name lab", 'extern "C" __global__ void __launch_bounds__(32) ring(int* x) { x[0] = 2; }', ns)
    assert isinstance(ns["ring"], fb.Kernel)


def test_kernel_names_are_read_through_nested_launch_bounds():
    from feedbeast.magic import KERNEL_NAMES
    assert KERNEL_NAMES.findall('extern "C" __global__ void __launch_bounds__(32 * (GROUP + 1)) ring(int* x) {}\n'
                                'extern "C" __global__ void __launch_bounds__(f(g(2)), 1) two(int* x) {}\n'
                                '__global__ __launch_bounds__(128) void three(int) {}') == ["ring", "two", "three"]


def test_arch_compatibility_rules():
    assert fb.runs_on("sm_80", (8, 6)) and fb.runs_on("sm_80", (8, 9))
    assert not fb.runs_on("sm_90a", (8, 9)) and fb.runs_on("sm_90a", (9, 0))
    assert not fb.runs_on("sm_90a", (10, 0)) and not fb.runs_on("sm_100a", (9, 0))
    assert not fb.runs_on("sm_90a", None)


def test_ptxas_performance_notes_are_reported_as_warnings():
    # No __launch_bounds__: ptxas cannot honour setmaxnreg and says so with C7508 in an info line.
    src = r"""extern "C" __global__ void k(float* x) {
      if (threadIdx.x < 128) { asm volatile("setmaxnreg.dec.sync.aligned.u32 40;"); }
      else { asm volatile("setmaxnreg.inc.sync.aligned.u32 232;"); x[threadIdx.x] = 1.f; } }"""
    mod = fb.compile(src, "sm_90a")
    assert any("C7508" in w for w in mod.warnings)
    assert "C7508" in mod.report()
    assert [ln[:7] for ln in mod.performance_losses] == ["(C7508)"]


def test_every_reason_ptxas_gives_for_serialising_wgmma_is_a_performance_loss():
    # A branch that picks the shape of a wgmma: ptxas cannot prove it uniform and serialises every wgmma of the
    # kernel, saying so with C7520, where a check for C7515 alone sees nothing; the same kernel without the branch
    # compiles as written.
    body = r"""#include <fb/wgmma.cuh>
extern "C" __global__ void __launch_bounds__(128) k(float* out, unsigned long long desc) {
  float d[32];
  fb::wgmma::fence();
  %s
  fb::wgmma::commit_group();
  fb::wgmma::wait_group<0>();
  fb::wgmma::fence_operand(d);
  for (int i = 0; i < 32; ++i) out[threadIdx.x * 32 + i] = d[i];
}"""
    branch = ("if (out[threadIdx.x] > 0.f) fb::wgmma::mma<64>(d, desc, desc, 0); "
              "else fb::wgmma::mma<32>(reinterpret_cast<float (&)[16]>(d), desc, desc, 0);")
    serialised = fb.compile(body % branch, "sm_90a")
    losses = serialised.performance_losses
    assert len(losses) == 1 and losses[0].startswith("(C7520)") and "serialized" in losses[0], losses
    assert not any("C7515" in ln for ln in serialised.log.splitlines())
    assert any("C7520" in w for w in serialised.warnings)
    assert fb.compile(body % "fb::wgmma::mma<64>(d, desc, desc, 0);", "sm_90a").performance_losses == []


def test_debug_waits_are_longer_under_a_sanitizer(monkeypatch):
    src = '#include <fb/debug.cuh>\nextern "C" __global__ void k(unsigned long long* t) { t[0] = FB_WAIT_TIMEOUT_NS; }\n'
    plain = fb.compile(src, "sm_90a", debug=True, defines={"FB_WAIT_TIMEOUT_NS": "500000000ull"})
    from feedbeast import hooks
    monkeypatch.setattr(hooks.mode, "sanitizer", True)      # what make sanitize's runner sets
    slow = fb.compile(src, "sm_90a", debug=True, defines={"FB_WAIT_TIMEOUT_NS": "500000000ull"})
    assert plain.cubin != slow.cubin


def test_magic_flags_fail_in_one_line_and_help_lists_them(capsys):
    """The %%cuda line's mistakes are one CompileError each, saying which (issue 28); --help compiles nothing."""
    from feedbeast.magic import cuda_cell
    body = 'extern "C" __global__ void k(int* x) { x[0] = 1; }'
    for line, says in (("--name my-mod", "--name my_mod"), ("--name 3d", "must not start with a digit"),
                       ("-D", "expected one argument"), ("-D 1X=2", "-D NAME or -D NAME=VALUE"),
                       ("-D STAGES={stages}", "'stages' is not a variable of the notebook"),
                       ("--archh sm_90a", "unrecognized arguments"), ("--name 'unclosed", "No closing quotation")):
        with pytest.raises(fb.CompileError) as e:
            cuda_cell(line, body, {})
        assert says in str(e.value) and "\n" not in str(e.value), (line, str(e.value))
    ns: dict = {}
    assert cuda_cell("--help", "", ns) is None and ns == {}
    out = capsys.readouterr().out
    assert "--min-arch ARCH" in out and "-D NAME[=VALUE]" in out and "--hazards" in out


def test_a_mangled_kernel_name_gets_a_hint_and_min_arch_is_the_target_without_a_gpu(capsys):
    from feedbeast.magic import cuda_cell, mangled_hint
    ns: dict = {}
    cuda_cell("--name m --min-arch sm_75", "__global__ void k(float* x) { x[0] = 1.f; }", ns)
    out = capsys.readouterr().out
    assert 'note: kernel _Z1kPf is the C++-mangled name of k: declare it extern "C" __global__' in out
    assert mangled_hint(["copy", "_Z4copyPKfPf"]) == [mangled_hint(["_Z4copyPKfPf"])[0]]
    if fb.gpu() is None:
        assert ns["m"].arch == "sm_75" and "compiled for sm_75" in out
        s = ns["_Z1kPf"].launch(1, 1, 0)
        assert str(s) == "skipped: launch _Z1kPf: needs a GPU (sm_75 or newer), this machine has none"
    with pytest.raises(fb.FeedbeastError, match="unknown arch 'sm_91'"):
        fb.compile("__global__ void k() {}", min_arch="sm_91")


def test_a_name_error_in_a_notebook_says_which_cell_has_not_run():
    """Run out of order (or after a restart), a lab's check cell meets a NameError: after the traceback, the
    extension says how to run the cells above. In a separate shell: IPython's shell is a process-wide singleton."""
    import subprocess
    code = ("from IPython.core.interactiveshell import InteractiveShell\n"
            "sh = InteractiveShell.instance()\n"
            "sh.run_cell('%load_ext feedbeast')\n"
            "r = sh.run_cell('lab.launch(1, 1)')\n"
            "print('SUCCESS', r.success, type(r.error_in_exec).__name__)\n"
            "print('@@ next @@')\n"
            "r = sh.run_cell('def f():\\n    x += 1\\nf()')\n"   # UnboundLocalError: no hint
            "print('LOCAL', type(r.error_in_exec).__name__)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    out = r.stdout + r.stderr
    assert "NameError" in out and "SUCCESS False NameError" in out, out
    assert "If `lab` is defined in a cell above (a `%%cuda --name lab` cell defines it too)" in out, out
    assert "Run > Run All Above Selected Cell" in out, out
    local = r.stdout.split("@@ next @@", 1)[1]
    assert "LOCAL UnboundLocalError" in local and "Run All Above" not in local, local


def test_a_kernel_built_for_whatever_gpu_runs_it_needs_only_a_gpu(monkeypatch):
    """With no arch named and no GPU here, compile builds for DEFAULT_ARCH to show SASS; on a GPU the same call builds
    for that GPU (a T4 runs chapter 01's kernels), so a launch's skip asks for a GPU, not for sm_90a."""
    fc, fs = sys.modules["feedbeast.compile"], sys.modules["feedbeast.skip"]   # (fb.compile is the function)
    monkeypatch.setattr(fc, "current_arch", lambda: None)
    monkeypatch.setattr(fs, "gpu", lambda: None)
    src = 'extern "C" __global__ void k(float* x) { x[threadIdx.x] = 1.f; }'
    x = fb.empty(32, np.float32)
    m = fb.compile(src)
    assert m.arch == fc.DEFAULT_ARCH and m.any_gpu
    assert str(m.k.launch(1, 32, x)) == "skipped: launch k: needs a GPU, this machine has none"
    assert str(m.debug_build().k.launch(1, 32, x)) == "skipped: launch k: needs a GPU, this machine has none"
    assert str(fb.compile(src, "sm_90a").k.launch(1, 32, x)) == "skipped: launch k: needs sm_90a, this machine has none"
    assert str(fb.compile(src, min_arch="sm_80").k.launch(1, 32, x)) == \
        "skipped: launch k: needs a GPU (sm_80 or newer), this machine has none"


def test_an_error_inside_the_simulator_shows_the_learner_s_lines_not_its_threads():
    """A Numba kernel's IndexError in the CUDA simulator came through five frames of the simulator's threads before
    the learner's line; the notebook now shows the cell's line, the kernel's line and the message (the toolkit's own
    errors already did), and FEEDBEAST_TRACEBACK=full the whole traceback."""
    import os
    import subprocess
    code = ("from IPython.core.interactiveshell import InteractiveShell\n"
            "sh = InteractiveShell.instance()\n"
            "sh.run_cell('%load_ext feedbeast')\n"
            "r = sh.run_cell('''import numpy as np, feedbeast.numba_support as fbn\n"
            "fbn.setup(True)\n"
            "from numba import cuda\n"
            "@cuda.jit\n"
            "def k(x):\n"
            "    x[cuda.threadIdx.x + 40] = 1.0\n"
            "k[1, 32](np.zeros(32, np.float32))''')\n"
            "print('RESULT', type(r.error_in_exec).__name__)\n")
    env = {k: v for k, v in os.environ.items() if k != "FEEDBEAST_TRACEBACK"}
    short = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    out = short.stdout + short.stderr
    assert "RESULT IndexError" in out and "line 6, in k: x[cuda.threadIdx.x + 40] = 1.0" in out, out
    assert "out of bounds" in out and "simulator/kernel.py" not in out and "FEEDBEAST_TRACEBACK=full" in out, out
    full = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**env, "FEEDBEAST_TRACEBACK": "full"})
    assert "simulator/kernel.py" in full.stdout + full.stderr, full.stdout + full.stderr


def test_a_cell_that_does_not_parse_shows_its_line_not_ipython_s_frames():
    """The course's error handler takes every Exception, parse errors too: IPython then handed it the SyntaxError
    of parsing the cell, and the notebook showed IPython's own frames (run_cell_async, ast_parse) above the cell's
    line. A cell that does not parse shows as it does without the course: its line, the caret and the message. A
    SyntaxError raised by code the cell runs (exec) still shows the cell's line that ran it."""
    import subprocess
    code = ("from IPython.core.interactiveshell import InteractiveShell\n"
            "sh = InteractiveShell.instance()\n"
            "sh.run_cell('%load_ext feedbeast')\n"
            "r = sh.run_cell('def f(:\\n    pass')\n"
            "print('RESULT', type(r.error_before_exec).__name__)\n"
            "sh.run_cell('exec(\"x = (\")')\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    out = re.sub(r"\x1b\[[0-9;]*m", "", run.stdout + run.stderr)
    parse, ran = out.split("RESULT SyntaxError")
    assert "def f(:" in parse and "SyntaxError: invalid syntax" in parse, out
    assert "interactiveshell.py" not in parse and "compilerop.py" not in parse, out
    assert "exec(\"x = (\")" in ran and "SyntaxError" in ran, out


def test_the_cache_and_nvrtc_read_the_same_characters(tmp_path, monkeypatch):
    """A str subclass that encodes other text than it holds would put one kernel's cubin under another's key."""
    monkeypatch.setenv("FEEDBEAST_CACHE", str(tmp_path))

    class Other(str):
        def encode(self, *a, **k):
            return b'extern "C" __global__ void other(int* x) { x[0] = 2; }'
    src = 'extern "C" __global__ void mine(int* x) { x[0] = 1; }'
    assert fb.compile(Other(src), "sm_90a").kernel_names == ["mine"]
    assert fb.compile(src, "sm_90a").kernel_names == ["mine"]
    with pytest.raises(fb.CompileError, match="must be text"):
        fb.compile(src.encode(), "sm_90a")



def test_static_shared_memory_past_48_kb_is_one_error_and_what_to_do():
    """ptxas's refusal comes with its whole resource report (and a NUL): the message keeps the error line and says
    how a kernel gets more than 48 KB."""
    src = ('extern "C" __global__ void big(float* y) {\n  __shared__ float t[16400];\n'
           '  t[threadIdx.x] = y[threadIdx.x];\n  __syncthreads();\n  y[threadIdx.x] = t[threadIdx.x + 1];\n}\n')
    with pytest.raises(fb.CompileError) as e:
        fb.compile(src, "sm_80")            # (ptxas takes more than 48 KB of static arrays for sm_90a)
    msg = str(e.value)
    assert "uses too much shared data" in msg and "takes 49152 bytes" in msg and "extern __shared__" in msg, msg
    assert "ptxas info" not in msg and "\x00" not in msg, msg


def test_an_unclosed_brace_is_named_beside_the_error_it_causes_below():
    src = ('__device__ float twice(float x) {\n  if (x > 0) {\n    return 2 * x;\n  return 0;\n}\n\n'
           'extern "C" __global__ void k(float* y) {\n  y[0] = twice(y[0]);\n}\n')
    with pytest.raises(fb.CompileError) as e:
        fb.compile(src, "sm_90a")
    assert "note: the cell opens 1 more { than it closes: a block above line" in str(e.value), str(e.value)


def test_a_kernel_not_in_the_module_is_an_attribute_error_that_says_what_it_has():
    """mod.name of a kernel the module lacks: a FeedbeastError (a short message in a notebook) and an AttributeError
    (hasattr); a renamed kernel is told so, not to write extern "C"."""
    mod = fb.compile('extern "C" __global__ void ring_lse(float* y) { y[0] = 1.f; }\n', "sm_90a")
    with pytest.raises(fb.FeedbeastError) as e:
        mod.ring_logsumexp
    assert isinstance(e.value, AttributeError) and not hasattr(mod, "ring_logsumexp")
    assert "it has: ring_lse" in str(e.value) and "name the kernel ring_logsumexp" in str(e.value), str(e.value)
    assert "extern" not in str(e.value)


def test_an_error_inside_a_header_keeps_the_line_of_the_cell_that_led_there():
    src = ('#include <cuda/std/tuple>\nextern "C" __global__ void k(int* y) {\n  auto t = cuda::std::tuple<int>{1};\n'
           '  y[0] = cuda::std::get<5>(t);\n}\n')
    with pytest.raises(fb.CompileError) as e:
        fb.compile(src, "sm_90a")
    assert "at line 4 of kernel.cu" in str(e.value) and "note: the cell opens" not in str(e.value), str(e.value)


@pytest.mark.parametrize("src", ["#ifdef FAST\nfor (;;) {\n#else\nfor (;;) {\n#endif\n  x;\n}\n",
                                 "#if 0\n{\n#endif\nint a = 1'000;\nchar c = '{';\n",
                                 "void f() {\n#if 0\n old();\n}\n#else\n now();\n}\n#endif\n",
                                 "#ifndef LAB_H\n#define LAB_H\nvoid f() { }\n#endif\n"])
def test_braces_are_counted_in_one_branch_of_a_conditional(src):
    from feedbeast.compile import _unclosed_braces
    assert _unclosed_braces(src) == 0 and _unclosed_braces(src + "void f() {\n") == 1


def test_a_gpu_older_than_the_source_gets_a_build_for_the_source_s_oldest_and_a_named_skip(monkeypatch):
    """cp.async on a T4 (sm_75): the cell says --min-arch sm_80, so it is built for sm_80, not refused by ptxas at
    the learner's line, and its launch is skipped naming both archs. A newer GPU keeps its own build."""
    comp = sys.modules["feedbeast.compile"]      # the module (fb.compile is its function)
    src = ('#include <fb/cp_async.cuh>\nextern "C" __global__ void k(float* y, const float* x) {\n'
           '  __shared__ __align__(16) float s[4];\n  fb::cp_async_cg16(s, x, 16);\n  fb::cp_async_commit();\n'
           '  fb::cp_async_wait<0>();\n  y[threadIdx.x] = s[threadIdx.x % 4];\n}\n')
    monkeypatch.setattr(comp, "current_arch", lambda: "sm_75")
    mod = fb.compile(src, min_arch="sm_80")
    assert mod.arch == "sm_80" and "LDGSTS" in str(mod.sass("k"))
    from feedbeast.device import runs_on
    assert not runs_on(mod.arch, (7, 5))                          # the launch is skipped there, by name
    monkeypatch.setattr(comp, "current_arch", lambda: "sm_86")
    assert fb.compile(src, min_arch="sm_80").arch == "sm_86"
    monkeypatch.setattr(comp, "current_arch", lambda: "sm_121a")  # a DGX Spark: a known arch, built for itself
    assert fb.compile(src, min_arch="sm_80").arch == "sm_121a"
    monkeypatch.setattr(comp, "current_arch", lambda: "sm_100a")  # wgmma-only source on a Blackwell: sm_90a's build
    assert fb.compile('extern "C" __global__ void k() {}', min_arch="sm_90a").arch == "sm_90a"


def test_expect_sass_says_how_its_arguments_go():
    """A kernel's name among the opcodes, a list of opcodes, forbid as one string (its letters were the opcodes and
    none matched: a pass), a kernel name mistyped in resources: each one message, no internal error."""
    import feedbeast as fb
    m = fb.compile('extern "C" __global__ void copy(const float* a, float* b) { b[threadIdx.x] = a[threadIdx.x]; }',
                   "sm_90a")
    for call, said in ((lambda: m.expect_sass("LDG.E", "copy"), "'copy' is a kernel of this module, not an opcode: "
                        "write kernel='copy'"),
                       (lambda: m.expect_sass(["LDG.E", "STG.E"]), "not list ['LDG.E', 'STG.E'] (unpack a list: *ops)"),
                       (lambda: m.expect_sass("LDG.E", forbid="STG"), "forbid='STG' is one string: give a tuple of "
                        "opcodes, forbid=('STG',)")):
        with pytest.raises(fb.FeedbeastError) as e:
            call()
        assert said in str(e.value), str(e.value)
    with pytest.raises(fb.SassMismatch, match="should not contain STG"):
        m.expect_sass("LDG.E", forbid=("STG",))
    with pytest.raises(fb.KernelNotFound, match="no kernel named 'cpy' in this module; it has: copy"):
        m.resources["cpy"]
    assert m.resources["copy"].registers > 0 and list(m.resources) == ["copy"]


def test_defines_needs_and_random_say_what_a_wrong_argument_was():
    """defines as a list (dict() said 'sequence element #0'), a bool define (NVRTC: identifier "True" is undefined),
    an arch typo in needs() (first said on the GPU it names), a shape computed with / or a seed that numpy refuses
    from deep inside: one message each, naming the call."""
    import numpy as np
    import feedbeast as fb
    src = 'extern "C" __global__ void k(float* y) { y[0] = TILE; }'
    for defines, said in ((["TILE=32"], "give a dict of -D macros, e.g. defines={'TILE': 32}"),
                          ({"TILE": True}, "a define's value is an int, C text (a str) or None (defined with no value)"
                                           ": 1 for True"),
                          ({"TILE": [32]}, "a define's value is an int")):
        with pytest.raises(fb.FeedbeastError) as e:
            fb.compile(src, "sm_90a", defines=defines)
        assert said in str(e.value), str(e.value)
    for value in (32, "32", np.int64(32), 1.5, None):
        assert fb.compile(src, "sm_90a", defines={"TILE": value}).kernel_names == ["k"]
    with pytest.raises(fb.FeedbeastError, match="unknown arch 'sm90a': use one of sm_75"):
        fb.needs("sm90a", "k")
    with pytest.raises(ValueError, match=r"needs\(shared=-1\)"):
        fb.needs("sm_80", "k", shared=-1)
    for call, said in ((lambda: fb.random(10 / 4), "random: shape (2.5,): each size must be a whole number >= 0"),
                       (lambda: fb.random("10"), "random: shape '10': give an int or a tuple of ints"),
                       (lambda: fb.random(None), "random: shape None"),
                       (lambda: fb.random(4, seed=-1), "random: seed=-1: a whole number >= 0"),
                       (lambda: fb.empty(None), "empty: shape None")):
        with pytest.raises(ValueError) as e:
            call()
        assert said in str(e.value), str(e.value)
    assert fb.random((3, 4), seed=np.int64(2)).shape == (3, 4) and fb.random(np.int64(5)).shape == (5,)


def test_cuda_h_in_a_kernel_says_it_is_a_host_header():
    """#include <cuda.h> (for CUtensorMap) fails inside the driver header with "cannot open stdlib.h": the error says
    what cuda.h is and where a kernel's tensor map comes from."""
    import feedbeast as fb
    with pytest.raises(fb.CompileError) as e:
        fb.compile('#include <cuda.h>\nextern "C" __global__ void k(float* y) { y[0] = 1; }', "sm_90a")
    assert "cuda.h cannot be compiled by NVRTC: it is the CUDA driver API's header for host code" in str(e.value)
    assert "fb::TensorMap" in str(e.value) and "catastrophic" not in str(e.value), str(e.value)


def test_highlight_takes_sass_text_and_opcodes():
    import feedbeast as fb
    m = fb.compile('extern "C" __global__ void copy(const float* a, float* b) { b[threadIdx.x] = a[threadIdx.x]; }',
                   "sm_90a")
    with pytest.raises(fb.FeedbeastError, match=r"highlight takes SASS text, not a Module: pass mod.sass\('kernel_name'\)"):
        fb.sass.highlight(m, "LDG")
    with pytest.raises(fb.FeedbeastError, match=r"highlight\(text, 'LDG.E', 'STG.E'\), not list"):
        fb.sass.highlight(m.sass("copy"), ["LDG", "STG"])
    assert ">> " in fb.sass.highlight(m.sass("copy"), "LDG", context=0)


def test_a_cache_that_cannot_be_made_only_costs_the_time(tmp_path, monkeypatch):
    """FEEDBEAST_CACHE naming a file (or a read-only home): the compile and its SASS still work, nothing is cached;
    use_cache=False writes nothing in a cache that can be written."""
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("FEEDBEAST_CACHE", str(blocked))
    src = 'extern "C" __global__ void bump(float* x) { x[threadIdx.x] += 1.0f; }'
    m = fb.compile(src, "sm_90a")
    assert m.kernel_names == ["bump"] and "FADD" in m.sass("bump") and blocked.read_text() == "not a folder"
    fresh = tmp_path / "cache"
    monkeypatch.setenv("FEEDBEAST_CACHE", str(fresh))
    fb.compile(src.replace("1.0f", "2.0f"), "sm_90a", use_cache=False)
    assert not list((fresh / "cubin").glob("*")) if fresh.exists() else True


def test_a_python_without_cuda_s_wheels_is_told_what_to_install(monkeypatch):
    """A plain `pip install feedbeast` has no CUDA wheels (they are its extras): compiling says so and names the
    install, as a ModuleNotFoundError, not an ImportError from inside the compile."""
    import sys
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)     # what an import of a missing package meets
    with pytest.raises(ModuleNotFoundError, match=r"feedbeast's CUDA wheels.*pip install \"feedbeast\[cu13\]\""):
        fb.compile('extern "C" __global__ void k() {}', "sm_90a", use_cache=False)
