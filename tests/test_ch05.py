"""Chapter 05 (TMA): the swizzle and descriptor models, the wgmma fragment map, tensor-map errors, the
SASS and resources of every kernel (CPU), and the kernels themselves on ragged sizes (Hopper only).

The kernels are read from the chapter and the lab solution, so that what is tested is what ships.
"""
import functools
import re
from pathlib import Path

import numpy as np
import pytest

import feedbeast as fb
from feedbeast import stress
from feedbeast import swizzle as sw
from feedbeast.examples import MATMUL_RAGGED, matmul_inputs, matmul_reference, rowsum_inputs, rowsum_reference
from feedbeast.cubin import initial_value
from feedbeast.course.notebook import load
from feedbeast.tensormap import check_rules

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = load(ROOT / "chapters/05-tma.ipynb")
SOLUTION = load(ROOT / "solutions/05-tma-ring.ipynb")
WGMMA_H = ROOT / "src/feedbeast/include/fb/wgmma.cuh"


@functools.cache
def module(name, nb=CHAPTER, **defines):
    return nb.compile(name, "sm_90a", **defines)


# ---- the swizzle model ----------------------------------------------------------------------------

def test_128B_swizzle_moves_chunk_c_of_row_r_to_c_xor_r_mod_8():
    for r in range(32):
        for c in range(8):
            assert sw.chunk_index(r, c, 128, 128) == 8 * r + (c ^ (r % 8))


@pytest.mark.parametrize("mode, lines", [(32, 2), (64, 4), (128, 8)])
def test_each_mode_xors_the_chunk_with_the_128B_line_index(mode, lines):
    # rows as wide as the swizzle span: a 128-byte line holds 128 // mode rows
    for r in range(64):
        for c in range(mode // 16):
            line, pos = divmod(r * mode + 16 * c, 128)
            assert sw.swizzle(r * mode + 16 * c, mode) == 128 * line + (((pos // 16) ^ (line % lines)) * 16)
    assert sw.period(mode) == 128 * lines


@pytest.mark.parametrize("mode", sw.MODES)
def test_swizzle_is_a_permutation_within_each_period_and_keeps_bytes_in_their_chunk(mode):
    offs = np.arange(4 * sw.period(mode))
    out = sw.swizzle(offs, mode)
    assert sorted(out.tolist()) == offs.tolist()
    assert np.all(out % 16 == offs % 16)
    assert np.all(out // sw.period(mode) == offs // sw.period(mode))


def test_bank_maps_columns_unique_only_with_128B_swizzle():
    plain, swz = sw.bank_map(8, 128, 0), sw.bank_map(8, 128, 128)
    assert all(len(set(plain[:, c])) == 1 for c in range(8))
    assert all(len(set(swz[:, c])) == 8 for c in range(8))
    assert all(len(set(swz[r, :])) == 8 for r in range(8))   # a row is still spread over all banks


@pytest.mark.parametrize("call, said", [
    (lambda: sw.swizzle(-16, 128), "swizzle: offset=-16: byte offsets are whole numbers >= 0"),
    (lambda: sw.swizzle(np.int64(-5), 64), "swizzle: offset=np.int64(-5): byte offsets"),
    (lambda: sw.swizzle(np.array([0, 16, -32]), 128), "swizzle: offset holds -32: byte offsets"),
    (lambda: sw.swizzle(16.0, 128), "swizzle: offset=16.0: byte offsets are whole numbers >= 0, an int or an integer"),
    (lambda: sw.swizzle(np.arange(4.0), 128), "swizzle: offset is an array of float64: byte offsets"),
    (lambda: sw.swizzle([16.0, 32.0], 32), "swizzle: offset is an array of float64"),
    (lambda: sw.swizzle(True, 128), "swizzle: offset=True: byte offsets"),
    (lambda: sw.swizzle("64", 128), "swizzle: offset='64': byte offsets"),
    (lambda: sw.swizzle(16, 128.0), "swizzle mode 128.0: use 0 (none), 32, 64 or 128"),
    (lambda: sw.chunk_index(-1, 0, 128, 128), "chunk_index: row=-1: a whole number >= 0"),
    (lambda: sw.chunk_index(0, -1, 128, 128), "chunk_index: chunk=-1: a whole number >= 0"),
    (lambda: sw.chunk_index(1.0, 0, 128, 128), "chunk_index: row=1.0: a whole number >= 0"),
    (lambda: sw.chunk_index(0, 8, 128, 128), "chunk_index: chunk=8: a row of 128 bytes holds chunks 0 to 7"),
    (lambda: sw.chunk_index(0, 0, 100, 128), "chunk_index: row_bytes=100: the bytes of a row, a multiple of 16"),
    (lambda: sw.chunk_index(0, 0, 0, 128), "chunk_index: row_bytes=0: the bytes of a row, a multiple of 16"),
    (lambda: sw.chunk_index(0, 0, 128, 7), "swizzle mode 7: use 0 (none), 32, 64 or 128"),
    (lambda: sw.bank_map(2.5, 128, 128), "bank_map: rows=2.5: the number of rows, a whole number >= 0"),
    (lambda: sw.bank_map(-1, 128, 128), "bank_map: rows=-1: the number of rows"),
    (lambda: sw.bank_map("8", 128, 128), "bank_map: rows='8': the number of rows"),
    (lambda: sw.bank_map(8, 100, 128), "bank_map: row_bytes=100: the bytes of a row, a whole multiple of 16"),
    (lambda: sw.bank_map(8, 128.0, 128), "bank_map: row_bytes=128.0: the bytes of a row"),
    (lambda: sw.bank_map(0, 128, 7), "swizzle mode 7: use 0 (none), 32, 64 or 128"),   # an empty map too
])
def test_swizzle_chunk_index_and_bank_map_refuse_what_is_not_a_byte_offset_a_row_or_a_chunk(call, said):
    """A negative offset came out as another negative number and a chunk past its row as a chunk of the next row,
    silently; a float offset or mode failed in numpy's words."""
    with pytest.raises(ValueError, match=re.escape(said)):
        call()


def test_swizzle_chunk_index_and_bank_map_take_numpy_integers_and_integer_arrays():
    offs = [0, 16, 200, 1023, 4096]
    assert [type(sw.swizzle(o, 128)) for o in offs] == [int] * 5      # an int stays an int
    for mode in (0, 128, np.int64(64)):
        ints = [int(sw.swizzle(o, mode)) for o in offs]
        for a in (np.array(offs), np.array(offs, np.uint32), np.array(offs, np.int16).reshape(1, 5)):
            assert sw.swizzle(a, mode).ravel().tolist() == ints
        assert [int(sw.swizzle(np.int32(o), mode)) for o in offs] == ints
        assert sw.swizzle(np.arange(0), mode).shape == (0,)
        assert sw.chunk_index(np.int64(9), np.int32(7), np.int64(128), mode) == sw.chunk_index(9, 7, 128, mode)
        assert sw.chunk_index(3, 3, 64, mode) == sw.swizzle(3 * 64 + 48, mode) // 16   # rows narrower than a line
        assert np.array_equal(sw.bank_map(np.int64(8), np.int64(128), mode), sw.bank_map(8, 128, mode))
        assert sw.bank_map(0, 128, mode).shape == (0, 8) and sw.bank_map(4, 0, mode).shape == (4, 0)
        assert sw.chunk_index(np.int16(300), 0, np.int16(128), mode) == sw.chunk_index(300, 0, 128, mode)  # no wrap
    with pytest.raises(ValueError, match=r"chunk=20: a row of 128 bytes holds chunks 0 to 7"):
        sw.chunk_index(np.uint8(0), np.uint8(20), np.uint8(128), 128)     # 20 * 16 wraps to 64 in uint8


def test_wavefront_model():
    assert sw.wavefronts([4 * lane for lane in range(32)], 4) == 1           # one word per bank
    assert sw.wavefronts([0] * 32, 4) == 1                                    # broadcast
    assert sw.wavefronts([128 * lane for lane in range(32)], 4) == 32         # one bank, 32 words
    assert sw.wavefronts([16 * lane for lane in range(32)], 16) == 4          # contiguous 512 B
    for c in range(8):
        assert sw.wavefronts(sw.column_read_addresses(c, 0), 16) == 32
        assert sw.wavefronts(sw.column_read_addresses(c, 128), 16) == 4


def test_plot_bank_maps_draws_one_panel_per_mode():
    axes = sw.plot_bank_maps((0, 128))
    assert len(axes) == 2


# ---- wgmma: descriptors and the accumulator fragment ------------------------------------------------

def test_descriptor_fields_follow_the_matrix_descriptor_format():
    d = sw.wgmma_descriptor(start=0x1_2340, lbo=16, sbo=1024, mode=128)
    assert d & 0x3FFF == 0x1234                    # bits 0-13: address >> 4
    assert (d >> 16) & 0x3FFF == 1                 # bits 16-29: LBO >> 4
    assert (d >> 32) & 0x3FFF == 64                # bits 32-45: SBO >> 4
    assert (d >> 49) & 7 == 0
    assert d >> 62 == 1                            # 128-byte swizzle
    assert sw.decode(d) == {"start": 0x12340, "lbo": 16, "sbo": 1024, "base_offset": 0, "swizzle": 128}
    assert sw.decode(sw.wgmma_descriptor(0, 0, 0, 64))["swizzle"] == 64
    assert sw.decode(sw.wgmma_descriptor(0, 0, 0, 32))["swizzle"] == 32
    # what the 14-bit fields cannot hold was encoded as another address (start=1 and start=2**20 both as 0)
    for kw, said in (({"start": 1}, "start=1: the descriptor holds it as bytes >> 4 in 14 bits"),
                     ({"start": 1 << 20}, "start=1048576"), ({"sbo": -16}, "sbo=-16"), ({"lbo": 8.0}, "lbo=8.0"),
                     ({"mode": 100}, "mode=100: the swizzle is one of 0, 128, 64, 32"),
                     ({"base_offset": 8}, "base_offset=8: a 3-bit field")):
        with pytest.raises(ValueError, match=re.escape(said)):
            sw.wgmma_descriptor(**{"start": 0, "lbo": 16, "sbo": 1024, "mode": 128, **kw})


def test_header_descriptor_uses_the_modelled_constants():
    # The fields are built from a shared-memory byte address (descriptor_k_major_sw128_at); the pointer form
    # converts its pointer (cvta to shared) and builds nothing else.
    text = WGMMA_H.read_text()
    body = text[text.index("descriptor_k_major_sw128_at(unsigned smem_addr)"):]
    body = body[:body.index("}")]
    for piece in ("descriptor_field(smem_addr)", "descriptor_field(16) << 16", "descriptor_field(1024) << 32",
                  "1ull << 62"):
        assert piece in body
    ptr = text[text.index("descriptor_k_major_sw128(const void* tile)"):]
    ptr = ptr[:ptr.index("}")]
    assert "descriptor_k_major_sw128_at(" in ptr and "__cvta_generic_to_shared(tile)" in ptr
    assert "return (bytes & 0x3FFFF) >> 4;" in text


@pytest.mark.parametrize("base", [0x0, 0x400 * 9, 0x8000])
def test_descriptor_addresses_equal_the_TMA_128B_swizzled_layout(base):
    """Per K slice kk (16 bf16 = 32 B) and row half h, the kernel's descriptor start is
    tile + 8192 h + 32 kk; every (row, value) it reads must be where TMA wrote A[64 h + m, 16 kk + k]."""
    for h in range(2):
        for kk in range(4):
            desc = sw.wgmma_descriptor(base + h * 64 * 128 + 32 * kk, 16, 1024, 128)
            for m in range(64):
                for k in range(16):
                    tma = base + int(sw.swizzle((64 * h + m) * 128 + 2 * (16 * kk + k), 128))
                    assert sw.k_major_sw128_address(desc, m, 2 * k) == tma


FRAGMENT_MAP = r"""
#include <fb/wgmma.cuh>
struct Map { short rc[128][64][2]; };
__host__ __device__ constexpr Map fragment_map() {   // evaluated by the compiler: the map is data in the cubin
  Map m{};
  for (int t = 0; t < 128; ++t)
    for (int i = 0; i < 64; ++i) {
      int row = -1, col = -1;
      fb::wgmma::accumulator_row_col(t, i, row, col);
      m.rc[t][i][0] = static_cast<short>(row);
      m.rc[t][i][1] = static_cast<short>(col);
    }
  return m;
}
__device__ const Map fragment_map_table = fragment_map();
extern "C" __global__ void keep_map(short* out) { out[threadIdx.x] = fragment_map_table.rc[threadIdx.x][0][0]; }
"""


def _fragment_map_from_header():
    """fb::wgmma::accumulator_row_col for every thread t and register i, computed by the compiler (constexpr)
    into a table in the cubin and read back from it (fb.cubin.initial_value): no GPU, and no C re-read as Python."""
    table = initial_value(fb.compile(FRAGMENT_MAP, "sm_90a"), "fragment_map_table", np.int16, (128, 64, 2))
    return (lambda t, i: int(table[t, i, 0])), (lambda t, i: int(table[t, i, 1]))


def _fragment_map_from_isa(n=128):
    """The wgmma .m64nNk16 D fragment as the PTX ISA draws it: four warps stacked, 16 rows each; each
    warp's 16 x N slab is N/8 blocks of 16 x 8; in a block, thread T of the warp holds (T/4, 2(T%4))
    and its right neighbour in the upper 8 rows (registers 4j, 4j+1), the same 8 rows lower (4j+2, 4j+3)."""
    owner = {}
    for warp in range(4):
        for j in range(n // 8):
            for lane in range(32):
                for half in range(2):
                    for e in range(2):
                        r = 16 * warp + 8 * half + lane // 4
                        c = 8 * j + 2 * (lane % 4) + e
                        owner[(r, c)] = (32 * warp + lane, 4 * j + 2 * half + e)
    return owner


def test_accumulator_map_in_the_header_matches_the_isa_layout():
    row, col = _fragment_map_from_header()
    isa = _fragment_map_from_isa(128)
    assert len(isa) == 64 * 128
    got = {(row(t, i), col(t, i)): (t, i) for t in range(128) for i in range(64)}
    assert got == isa


def test_store_code_writes_register_pairs_to_neighbouring_columns():
    row, col = _fragment_map_from_header()
    for t in range(128):
        for i in range(0, 64, 2):
            assert row(t, i + 1) == row(t, i) and col(t, i + 1) == col(t, i) + 1 and col(t, i) % 2 == 0


# ---- tensor maps: bad inputs and the sizes the chapter uses ---------------------------------------------

@pytest.mark.parametrize("make, message", [
    (lambda: fb.tensor_map(fb.DeviceArray((64, 64), np.float32, ptr=0x1008, owner=False), box=(32, 32)),
     "not 16-byte aligned"),
    (lambda: fb.tensor_map(fb.empty((64, 64), np.float32), box=(32, 32), shape=(64, 63),
                           strides_bytes=(252, 4)), "not a multiple of 16 B"),
    (lambda: fb.tensor_map(fb.empty((64, 1024), np.float32), box=(32, 512)), "must be 1 to 256"),
    (lambda: fb.tensor_map(np.zeros((20, 1024), np.float32), box=(32, 64)), "numpy array"),
    (lambda: fb.tensor_map(fb.empty((64, 1024), np.float32), box=(32, 64), swizzle=128), "spans only 128 B"),
])
def test_tensor_map_rules_the_chapter_shows(make, message):
    with pytest.raises(fb.TensorMapError, match=message):
        make()


@pytest.mark.parametrize("m, n, k", [MATMUL_RAGGED, (300, 200, 136), (4096, 4096, 4096)])
def test_gemm_sizes_satisfy_the_tma_rules(m, n, k):
    for rows in (m, n):   # A is M x K, Bt is N x K: both K-contiguous bf16
        check_rules((rows, k), fb.bfloat16, (2 * k, 2), (128, 64), address=0, swizzle=128)


@pytest.mark.parametrize("rows, cols", [(37, 1000), (16381, 8188), (1000, 1004), (16384, 8192)])
def test_rowsum_sizes_satisfy_the_tma_rules(rows, cols):
    check_rules((rows, cols), np.float32, (4 * cols, 4), (16, 256), address=0)


# ---- every kernel compiles for sm_90a with the SASS the chapter promises, and no spills -----------------

KERNELS = [
    ("raw", "load_box_raw", ("UTMALDG", "SYNCS.ARRIVE.TRANS64", "SYNCS.PHASECHK"), {}),
    ("scale", "scale_tiles", ("UTMALDG", "UTMASTG", "FENCE.VIEW.ASYNC.S"), {}),
    ("bank", "columns_plain", ("UTMALDG", "LDS.128"), {}),
    ("bank", "columns_swizzled", ("UTMALDG", "LDS.128"), {}),
    ("ring", "rowsum_tma", ("UTMALDG", "UTMACCTL.PF", "SYNCS.ARRIVE.TRANS64"), {}),
    ("ring", "rowsum_tma", ("UTMALDG",), {"STAGES": "6"}),
    ("gemm", "gemm_tma_wgmma", ("UTMALDG", "UTMACCTL.PF", "HGMMA.64x128x16.F32.BF16", "WARPGROUP.ARRIVE"), {}),
    ("gemm", "gemm_tma_wgmma", ("UTMALDG", "HGMMA"), {"STAGES": "3"}),
]


@pytest.mark.parametrize("name, kernel, opcodes, defines", KERNELS,
                         ids=[f"{k}-{d or ''}" for _, k, _, d in KERNELS])
def test_kernel_sass_and_resources(name, kernel, opcodes, defines):
    mod = module(name, **defines)
    mod.expect_sass(*opcodes, kernel=kernel, forbid=("LDG",) if name == "ring" else ())
    res = mod.resources[kernel]
    assert res.spills == 0 and res.stack == 0, str(res)
    assert not mod.performance_losses, mod.performance_losses   # wgmma serialised, for any reason


def test_gemm_keeps_one_wgmma_group_in_flight():
    hist = module("gemm").histogram("gemm_tma_wgmma")
    assert hist["HGMMA.64x128x16.F32.BF16"] == 8   # 4 K slices x 2 row halves per stage
    sass = module("gemm").sass("gemm_tma_wgmma")
    assert "WARPGROUP.DEPBAR.LE gsb0, 0x1" in sass


def test_lab_solution_kernel_compiles_to_utmaldg():
    mod = module("lab", SOLUTION)
    mod.expect_sass("UTMALDG", "UTMASTG", kernel="transpose_ring", forbid=("LDG", "STG"))
    assert mod.resources["transpose_ring"].spills == 0


# ---- on a Hopper GPU: the kernels on ragged sizes -----------------------------------------------------

def _rowsum(mod, kernel, x, br, bc, warps, stages):
    rows, cols = x.shape
    xd, y = fb.to_device(x), fb.empty(rows, np.float32)
    tm = fb.tensor_map(xd, box=(br, bc))
    mod[kernel].launch(-(-rows // br), 32 * (warps + 1), tm, y, rows, cols, shared=stages * br * bc * 4 + 128)
    return y


@pytest.mark.parametrize("rows, cols", [(37, 1000), (1000, 1004), (16381, 8188), (257, 256)])
@pytest.mark.parametrize("stages", [2, 4])
def test_gpu_rowsum_tma_ragged(gpu90, rows, cols, stages):
    x = rowsum_inputs(rows, cols, seed=rows + cols)
    y = _rowsum(module("ring", STAGES=str(stages)), "rowsum_tma", x, 16, 256, 4, stages)
    fb.check(y, rowsum_reference(x), name=f"rowsum_tma {rows}x{cols} stages={stages}")


def test_gpu_load_and_store_ragged(gpu90):
    rows, cols = 3001, 2004
    host = fb.random((rows, cols), np.float32, seed=2)
    xd, yd = fb.to_device(host), fb.empty((rows, cols), np.float32)
    module("scale").scale_tiles.launch((-(-cols // 64), -(-rows // 32)), 256, fb.tensor_map(xd, box=(32, 64)),
                                       fb.tensor_map(yd, box=(32, 64)))
    fb.check(yd, 2 * host.astype(np.float64))


def test_gpu_one_box_over_the_edge_is_zero_filled(gpu90):
    host = fb.random((100, 36), np.float32, seed=1)
    out = fb.empty((32, 32), np.float32)
    module("raw").load_box_raw.launch(1, 128, fb.tensor_map(fb.to_device(host), box=(32, 32)), out, 80, 24)
    expect = np.zeros((32, 32))
    expect[:20, :12] = host[80:, 24:]
    fb.check(out, expect)


@pytest.mark.parametrize("kernel, mode", [("columns_plain", 0), ("columns_swizzled", 128)])
def test_gpu_column_reads_see_the_tile(gpu90, kernel, mode):
    tile = fb.random((64, 32), np.float32, seed=3)
    td = fb.to_device(tile)
    out = fb.empty(2 * 256, np.float32)
    module("bank")[kernel].launch(2, 256, fb.tensor_map(td, box=(64, 32), swizzle=mode), out, 3, shared=9 * 1024)
    t = np.arange(512) % 256
    fb.check(out, 3 * tile.astype(np.float64).sum(axis=1)[(t // 32 % 2) * 32 + t % 32], tol=1e-5)


def check_gemm(m, n, k, stages, repeat=False):
    a, b = matmul_inputs(m, n, k, fb.bfloat16, seed=m + n + k)
    ad, btd = fb.to_device(a), fb.to_device(np.ascontiguousarray(b.T))
    maps = (fb.tensor_map(ad, box=(128, 64), swizzle=128), fb.tensor_map(btd, box=(128, 64), swizzle=128))
    c = fb.empty((m, n), np.float32)
    kern = module("gemm", STAGES=str(stages)).gemm_tma_wgmma

    def once():
        c.poison()
        kern.launch((-(-n // 128), -(-m // 128)), 128, *maps, c, m, n, k, shared=stages * 32 * 1024 + 1024)
        return c
    out = stress.repeat_identical(once) if repeat else once()
    fb.check(out, matmul_reference(a, b), tol=1e-3, name=f"gemm {m}x{n}x{k} stages={stages}")


@pytest.mark.parametrize("m, n, k", [MATMUL_RAGGED, (300, 200, 136), (128, 128, 64), (257, 391, 1032)])
@pytest.mark.parametrize("stages", [3, 4])
def test_gpu_gemm_tma_wgmma_ragged(gpu90, m, n, k, stages):
    check_gemm(m, n, k, stages)


# make stress: random ragged shapes within the TMA rules (16-byte row strides), repeated runs bit for bit

def test_gpu_stress_rowsums(gpu90):
    runs = [(module("ring", STAGES="4"), "rowsum_tma", 16, 256, 4, 4)]   # (lab 05 checks its own kernel)
    for i, (rows, cols) in enumerate(stress.sizes((3001, 4100), multiple_of=(16, 256), align=(1, 4),
                                                  at_least=(16, 256))):
        x = rowsum_inputs(rows, cols, seed=i)
        for mod, kernel, *shape in runs:
            if i == 0:
                y = stress.repeat_identical(lambda: _rowsum(mod, kernel, x, *shape))
            else:
                y = _rowsum(mod, kernel, x, *shape)
            fb.check(y, rowsum_reference(x), name=f"{kernel} {rows}x{cols}")


def test_gpu_stress_gemm_tma_wgmma(gpu90):
    for i, (m, n, k) in enumerate(stress.sizes((1000, 1032, 1000), multiple_of=(128, 128, 64), align=(1, 1, 8),
                                               at_least=(128, 128, 64))):    # the TMA boxes
        check_gemm(m, n, k, 3, repeat=i == 0)
