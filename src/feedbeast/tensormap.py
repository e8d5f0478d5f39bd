"""Tensor maps (CUtensorMap) for TMA, checked against the driver's rules before the driver sees them.

Chapter 05 explains tensor maps: boxes, swizzle, out-of-bound fill and the driver's rules.

    tmap = tensor_map(a, box=(64, 64), swizzle=128)    # a: 2-D DeviceArray, shapes in numpy order

Shapes, boxes and strides are given in numpy order (outermost first); the driver wants them
innermost first, and this module does the reversal. Every rule of cuTensorMapEncodeTiled that a
learner can break is checked here with a message naming the rule (CUDA Driver API, "Tensor Map
Object Management"), and only those: tests/test_tensormap.py asks the driver the same questions. The map is a 128-byte, 64-byte aligned value passed to a kernel as a
`const __grid_constant__ CUtensorMap` (our headers declare it as `fb::TensorMap`).
"""
from __future__ import annotations

import dataclasses
import sys
import types

import numpy as np

from .errors import TensorMapError

SWIZZLES = (0, 32, 64, 128)
OOB_FILL = ("zero", "nan")
L2_PROMOTION = (0, 64, 128, 256)


def _dtype_code(dtype):
    from cuda.bindings import driver
    from .memory import bfloat16
    T = driver.CUtensorMapDataType
    table = {np.dtype(np.uint8): T.CU_TENSOR_MAP_DATA_TYPE_UINT8,
             np.dtype(np.uint16): T.CU_TENSOR_MAP_DATA_TYPE_UINT16,
             np.dtype(np.uint32): T.CU_TENSOR_MAP_DATA_TYPE_UINT32,
             np.dtype(np.int32): T.CU_TENSOR_MAP_DATA_TYPE_INT32,
             np.dtype(np.uint64): T.CU_TENSOR_MAP_DATA_TYPE_UINT64,
             np.dtype(np.int64): T.CU_TENSOR_MAP_DATA_TYPE_INT64,
             np.dtype(np.float16): T.CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
             np.dtype(np.float32): T.CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
             np.dtype(np.float64): T.CU_TENSOR_MAP_DATA_TYPE_FLOAT64}
    if bfloat16 is not None:
        table[bfloat16] = T.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
    return table[np.dtype(dtype)]


SUPPORTED_DTYPES = ("uint8", "uint16", "uint32", "int32", "uint64", "int64", "float16", "bfloat16",
                    "float32", "float64")


@dataclasses.dataclass(frozen=True)
class TensorMap:
    """A checked tensor map; `raw` holds its 128 bytes once a driver has encoded it.

    However it is made (fb.tensor_map, its constructor, dataclasses.replace), the description is checked against the
    driver's rules when it is made, and a map over GPU memory is encoded from its own fields then: a map cannot say
    one thing and hold the bytes of another. It cannot be changed afterwards (frozen)."""
    shape: tuple
    dtype: np.dtype
    box: tuple
    strides_bytes: tuple
    swizzle: int
    oob_fill: str
    l2_promotion: int
    element_strides: tuple
    raw: bytes | None = None
    array: object = dataclasses.field(default=None, repr=False, compare=False)   # kept alive with the map

    def __post_init__(self):
        import operator
        put = lambda k, v: object.__setattr__(self, k, v)   # noqa: E731  (frozen)
        try:     # plain ints and tuples of them: a subclass of int could answer comparisons as it likes
            put("shape", tuple(operator.index(n) for n in self.shape))
            put("box", tuple(operator.index(b) for b in self.box))
            put("strides_bytes", tuple(operator.index(x) for x in self.strides_bytes))
            put("element_strides", tuple(operator.index(e) for e in self.element_strides))
            put("swizzle", operator.index(self.swizzle))
            put("l2_promotion", operator.index(self.l2_promotion))
        except TypeError as e:
            raise TensorMapError(f"a tensor map's sizes, strides, box, swizzle and L2 promotion are ints: {e}") from None
        put("oob_fill", str(self.oob_fill))
        put("dtype", np.dtype(self.dtype))
        ptr = getattr(self.array, "ptr", None) if self.array is not None else None
        if self.array is not None:
            check_array(self.array, self.shape, self.strides_bytes)
        check_rules(self.shape, self.dtype, self.strides_bytes, self.box, address=ptr or 0, swizzle=self.swizzle,
                    element_strides=self.element_strides, oob_fill=self.oob_fill, l2_promotion=self.l2_promotion)
        if ptr is not None:      # encoded from these fields, whatever bytes were handed in
            put("raw", _encode_here(self, ptr))

    @property
    def box_bytes(self) -> int:
        """Bytes one TMA load of a full box writes to shared memory: what expect_tx must announce."""
        return int(np.prod(self.box)) * self.dtype.itemsize

    def __repr__(self):
        return (f"TensorMap({'x'.join(map(str, self.shape))} {self.dtype}, box "
                f"{'x'.join(map(str, self.box))} ({self.box_bytes} B), swizzle {self.swizzle or 'none'}, "
                f"OOB fill {self.oob_fill}{'' if self.raw else ', not encoded: no GPU with TMA here'})")


# The rules below are the documented requirements of cuTensorMapEncodeTiled (CUDA Driver API, "Tensor
# Map Object Management", cuTensorMapEncodeTiled), restricted to what this toolkit exposes (no
# interleave, tiled mode). Each is tested against the driver itself on a GPU (tests/test_tensormap.py:
# for a grid of descriptions, this check accepts exactly when the driver returns CUDA_SUCCESS).
# Nothing here is a rule of our own: a box larger than the tensor, for example, is legal, and the TMA
# unit fills the box's elements outside the tensor (the OOB fill).
MAX_RANK = 5                 # "tensorRank must be non-zero and less than or equal to ... 5"
# Rank 1 is documented as legal, but the call this module makes refused every rank-1 tiled map it was given
# on an H100 with driver 580 (CUDA 13.0) through cuda.bindings: (1024,), (256,), (100,), (64,) float32 and
# (64,) bf16, boxes of 4 to 256 elements, with and without swizzle (CUDA_ERROR_INVALID_VALUE), while the same
# data as 1 x n was accepted. Whether the driver or the binding's empty stride list is the cause, the map
# cannot be made here, so the check refuses first and says what works.
MIN_RANK = 2
MAX_DIM = 2**32              # globalDim: "non-zero and less than or equal to 2^32"
STRIDE_ALIGN = 16            # globalStrides: "a multiple of 16"
MAX_STRIDE = 2**40           # globalStrides: "less than 2^40"
ADDRESS_ALIGN = 16           # globalAddress: "aligned to 16 bytes" (32 with 32 B interleave, not used here)
MAX_BOX = 256                # boxDim: "non-zero and less than or equal to 256"
BOX_INNER_ALIGN = 16         # boxDim[0] * element size: "a multiple of 16 bytes" (interleave NONE)
MAX_ELEMENT_STRIDE = 8       # elementStrides: "non-zero and less than or equal to 8"
# swizzle (interleave NONE): the inner box dimension in bytes must be <= the swizzle span (32, 64, 128 B).
# oobFill: CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA only with a floating-point data type.


def check_rules(shape, dtype, strides_bytes, box, *, address: int, swizzle=0, element_strides=None,
                oob_fill="zero", l2_promotion=0):
    """Raise TensorMapError for the first rule of cuTensorMapEncodeTiled the description breaks.

    Shapes, strides and boxes outermost first (numpy order); strides_bytes has one entry per dimension
    and its last (the innermost, the element size) is implied by the driver's interface. Pure Python:
    no GPU needed. Array-level checks (a host array, strides that leave the allocation) are in
    tensor_map.
    """
    dtype = np.dtype(dtype)
    shape, strides_bytes, box = tuple(shape), tuple(strides_bytes), tuple(box)
    rank = len(shape)
    if dtype.name not in SUPPORTED_DTYPES:
        raise TensorMapError(f"dtype {dtype} has no TMA data type; use one of {', '.join(SUPPORTED_DTYPES)}")
    if not 1 <= rank <= MAX_RANK:
        raise TensorMapError(f"rank {rank}: tiled tensor maps have 1 to {MAX_RANK} dimensions")
    if rank < MIN_RANK:
        raise TensorMapError(f"rank 1: describe the vector as a 1 x {shape[0]} matrix (shape=(1, {shape[0]}), "
                             f"box=(1, {box[0] if box else 'n'})): a rank-1 map was refused by driver 580 through "
                             "cuda.bindings in every case tried")
    if len(box) != rank:
        raise TensorMapError(f"box has {len(box)} dimension{'s' * (len(box) != 1)} but the tensor has {rank}: give one box "
                             "size per tensor dimension, outermost first")
    if len(strides_bytes) != rank:
        raise TensorMapError(f"strides_bytes has {len(strides_bytes)} entries but the tensor has {rank} "
                             "dimensions: give one stride in bytes per dimension, outermost first")
    element_strides = tuple(element_strides) if element_strides is not None else (1,) * rank
    if len(element_strides) != rank:
        raise TensorMapError(f"element_strides has {len(element_strides)} entries but the tensor has {rank} "
                             "dimensions: give one per dimension, outermost first")
    if address % ADDRESS_ALIGN:
        raise TensorMapError(f"base address 0x{address:x} is not 16-byte aligned (it is {address % 16} B "
                             "past a boundary): TMA needs a 16 B aligned global address; allocate the "
                             "tensor on its own or offset it by a multiple of 16 B")
    for i, n in enumerate(shape):
        if not 1 <= n <= MAX_DIM:
            raise TensorMapError(f"dimension {i} has size {n}: sizes must be 1 to 2^32")
    for i, s in enumerate(strides_bytes[:-1]):   # the innermost stride is the element size, implied
        if s % STRIDE_ALIGN:
            raise TensorMapError(f"stride of dimension {i} is {s} B, not a multiple of 16 B: pad the rows "
                                 f"(e.g. to {-(-s // 16) * 16} B) so that every row starts 16 B aligned")
        if not 0 <= s < MAX_STRIDE:
            raise TensorMapError(f"stride of dimension {i} is {s} B: strides must be below 2^40 B")
    for i, b in enumerate(box):
        if not 1 <= b <= MAX_BOX:
            raise TensorMapError(f"box dimension {i} is {b}: each box dimension must be 1 to 256 elements")
    for i, e in enumerate(element_strides):
        if not 1 <= e <= MAX_ELEMENT_STRIDE:
            raise TensorMapError(f"element stride {i} is {e}: element strides must be 1 to 8")
    inner_bytes = box[-1] * dtype.itemsize
    if inner_bytes % BOX_INNER_ALIGN:
        raise TensorMapError(f"the innermost box dimension is {inner_bytes} B ({box[-1]} x {dtype.itemsize} B): "
                             "it must be a multiple of 16 B")
    if swizzle not in SWIZZLES:
        raise TensorMapError(f"swizzle {swizzle!r}: use 0 (none), 32, 64 or 128 (bytes)")
    if swizzle and inner_bytes > swizzle:
        raise TensorMapError(f"the innermost box dimension is {inner_bytes} B but a {swizzle} B swizzle spans "
                             f"only {swizzle} B: make box[-1] at most {swizzle // dtype.itemsize} elements"
                             + (" or use a wider swizzle" if swizzle < 128 else " (128 B is the widest swizzle)"))
    if oob_fill not in OOB_FILL:
        raise TensorMapError(f"oob_fill {oob_fill!r}: use 'zero' or 'nan' (NaN fill needs a float type)")
    if oob_fill == "nan" and dtype.kind != "f" and dtype.name != "bfloat16":
        raise TensorMapError("oob_fill='nan' needs a floating-point dtype")
    if l2_promotion not in L2_PROMOTION:
        raise TensorMapError(f"l2_promotion {l2_promotion!r}: use 0, 64, 128 or 256 (bytes)")


def check_array(array, shape, strides_bytes):
    """What the driver cannot see: the description must stay inside `array`'s memory, and the innermost
    dimension is contiguous (the driver's interface has no innermost stride: every box row is read as
    consecutive elements). A read outside the allocation is a memory fault of the TMA unit, not an
    encoding error: cuTensorMapEncodeTiled accepts it."""
    from .memory import DeviceArray
    if isinstance(array, np.ndarray):
        raise TensorMapError("tensor_map got a numpy array, which lives in host memory: a tensor map "
                             "describes GPU memory. Copy it first: fb.tensor_map(fb.to_device(x), box)")
    if not isinstance(array, DeviceArray):
        raise TensorMapError(f"tensor_map needs a device array from fb.empty / fb.to_device, got a "
                             f"{type(array).__name__}")
    if len(shape) != len(strides_bytes):
        raise TensorMapError(f"strides_bytes has {len(strides_bytes)} entries but shape {tuple(shape)} has "
                             f"{len(shape)}: give one stride in bytes per dimension, outermost first")
    itemsize = array.dtype.itemsize
    if strides_bytes and strides_bytes[-1] != itemsize:
        raise TensorMapError(f"the innermost stride is {strides_bytes[-1]} B but the element is {itemsize} B: "
                             "TMA reads the innermost dimension contiguously. To take every k-th element, "
                             "use element_strides")
    if any(n < 1 for n in shape) or any(s < 0 for s in strides_bytes):
        return   # check_rules names the bad size or stride
    extent = sum((n - 1) * s for n, s in zip(shape, strides_bytes)) + itemsize
    if extent > array.nbytes:
        raise TensorMapError(f"shape {tuple(shape)} with strides {tuple(strides_bytes)} B reaches {extent} B "
                             f"into the array, which has only {array.nbytes} B ({array.shape} "
                             f"{array.dtype}): the TMA unit would read or write past the allocation")


def tensor_map(array, box, *, swizzle: int = 0, oob_fill: str = "zero", l2_promotion: int = 0,
               element_strides=None, shape=None, strides_bytes=None) -> TensorMap:
    """A tiled tensor map over `array` (a DeviceArray), checked, and encoded when a GPU is present.

    shape/strides_bytes override the array's own (to view a padded buffer as a smaller tensor).
    A box may be larger than the tensor: the TMA unit fills what lies outside (oob_fill).
    """
    if isinstance(array, np.ndarray) or not hasattr(array, "strides_bytes"):
        check_array(array, (), ())
    shape = tuple(int(n) for n in (shape if shape is not None else array.shape))
    strides = tuple(int(s) for s in (strides_bytes if strides_bytes is not None else array.strides_bytes))
    box = tuple(box if not np.isscalar(box) else (box,))
    if not all(isinstance(b, (int, np.integer)) and not isinstance(b, bool) for b in box):
        whole = [int(b) for b in box if isinstance(b, (int, float, np.number)) and not isinstance(b, (bool, np.bool_))
                 and float(b).is_integer()]
        raise TensorMapError(f"box={box}: each box dimension is a whole number of elements, an int"
                             + (f": box={tuple(whole)}" if len(whole) == len(box) else ""))
    box = tuple(int(b) for b in box)
    check_array(array, shape, strides)
    address = array.ptr if array.ptr is not None else 0
    check_rules(shape, array.dtype, strides, box, address=address, swizzle=swizzle,
                element_strides=element_strides, oob_fill=oob_fill, l2_promotion=l2_promotion)
    return TensorMap(shape, array.dtype, box, strides, swizzle, oob_fill, l2_promotion,     # encoded there
                     tuple(element_strides or (1,) * len(shape)), array=array)


def encode_result(shape, dtype, strides_bytes, box, *, address: int, swizzle=0, element_strides=None,
                  oob_fill="zero", l2_promotion=0) -> str:
    """Ask the driver: the name of what cuTensorMapEncodeTiled returns for this description
    ('CUDA_SUCCESS' or an error), with no check of ours in front. Needs a driver."""
    from cuda.bindings import driver
    rank = len(shape)
    dtype = np.dtype(dtype)
    sw = {0: "NONE", 32: "32B", 64: "64B", 128: "128B"}.get(swizzle, "NONE")
    l2 = {0: "NONE", 64: "L2_64B", 128: "L2_128B", 256: "L2_256B"}.get(l2_promotion, "NONE")
    fill = {"zero": "NONE", "nan": "NAN_REQUEST_ZERO_FMA"}[oob_fill]
    u64, u32 = driver.cuuint64_t, driver.cuuint32_t
    es = element_strides if element_strides is not None else (1,) * rank
    err, _ = driver.cuTensorMapEncodeTiled(
        _dtype_code(dtype), rank, address,
        [u64(n) for n in reversed(shape)],
        [u64(s) for s in reversed(tuple(strides_bytes)[:-1])],
        [u32(b) for b in reversed(box)],
        [u32(e) for e in reversed(es)],
        driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        getattr(driver.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{sw}"),
        getattr(driver.CUtensorMapL2promotion, f"CU_TENSOR_MAP_L2_PROMOTION_{l2}"),
        getattr(driver.CUtensorMapFloatOOBfill, f"CU_TENSOR_MAP_FLOAT_OOB_FILL_{fill}"))
    return err.name


def _encode_here(tm: TensorMap, address: int) -> bytes | None:
    """The map's bytes; None on a GPU without TMA (before compute capability 9.0) whose driver refuses to encode one:
    no kernel there can read it (every launch that takes one needs sm_90 or later and is skipped), so the map is a
    placeholder, as without a GPU, not an error that stops the notebook before those skips."""
    from .device import gpu
    from .errors import FeedbeastError
    try:
        return _encode(tm, address)
    except FeedbeastError:
        g = gpu()
        if g is None or tuple(g.cc) >= (9, 0):
            raise
        return None


def _encode(tm: TensorMap, address: int) -> bytes:
    from cuda.bindings import driver
    from .device import _check
    rank = len(tm.shape)
    sw = {0: "NONE", 32: "32B", 64: "64B", 128: "128B"}[tm.swizzle]
    l2 = {0: "NONE", 64: "L2_64B", 128: "L2_128B", 256: "L2_256B"}[tm.l2_promotion]
    fill = {"zero": "NONE", "nan": "NAN_REQUEST_ZERO_FMA"}[tm.oob_fill]
    u64, u32 = driver.cuuint64_t, driver.cuuint32_t
    cmap = _check(driver.cuTensorMapEncodeTiled(
        _dtype_code(tm.dtype), rank, address,
        [u64(n) for n in reversed(tm.shape)],
        [u64(s) for s in reversed(tm.strides_bytes[:-1])],
        [u32(b) for b in reversed(tm.box)],
        [u32(e) for e in reversed(tm.element_strides)],
        driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        getattr(driver.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{sw}"),
        getattr(driver.CUtensorMapL2promotion, f"CU_TENSOR_MAP_L2_PROMOTION_{l2}"),
        getattr(driver.CUtensorMapFloatOOBfill, f"CU_TENSOR_MAP_FLOAT_OOB_FILL_{fill}")))
    import struct
    return struct.pack("<16Q", *[int(v) for v in cmap.opaque])


class _ThisModule(types.ModuleType):
    """`fb.tensormap(...)`, a call of this module where the function `fb.tensor_map(...)` was meant, says so."""

    def __call__(self, *args, **kwargs):
        raise TypeError("fb.tensormap is the toolkit's module of tensor maps; the function is fb.tensor_map(...)")


sys.modules[__name__].__class__ = _ThisModule
