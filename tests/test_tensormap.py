"""Tensor maps: every rule fb.tensor_map enforces is a rule of cuTensorMapEncodeTiled, and only those.

CPU: each rule has its own message; array-level mistakes (a numpy array, wrong-length strides, a
non-contiguous innermost stride, a shape past the allocation) are clear errors.
GPU: the driver agreement test asks cuTensorMapEncodeTiled the same question as check_rules for a grid of
valid and invalid descriptions and expects the same answer (we accept <=> the driver returns CUDA_SUCCESS).
"""
import dataclasses

import numpy as np
import pytest

import feedbeast as fb
from feedbeast.tensormap import check_rules, encode_result


def rules(shape=(100, 64), dtype=np.float32, box=(32, 32), address=0x1000, strides=None, **kw):
    itemsize = np.dtype(dtype).itemsize
    strides = strides or (shape[-1] * itemsize, itemsize)
    check_rules(shape, dtype, strides, box, address=address, **kw)


def test_a_good_map_passes():
    rules()
    rules(dtype=fb.bfloat16, box=(64, 64), swizzle=128, strides=(128, 2))


def test_a_box_larger_than_the_tensor_is_legal():
    # The driver accepts it and the TMA unit fills what lies outside: a decode step (M = 1 or 8) needs it.
    rules(shape=(8, 64), dtype=fb.bfloat16, box=(128, 64), swizzle=128)
    rules(shape=(1, 64), dtype=fb.bfloat16, box=(256, 64), swizzle=128)
    rules(shape=(1000, 32), dtype=fb.bfloat16, box=(128, 64), strides=(64, 2))


@pytest.mark.parametrize("kw, message", [
    ({"address": 0x1008}, "not 16-byte aligned"),
    ({"shape": (100, 30), "box": (32, 28), "strides": (120, 4)}, "not a multiple of 16 B"),
    ({"box": (32, 300)}, "must be 1 to 256"),
    ({"box": (0, 32)}, "must be 1 to 256"),
    ({"box": (32, 2)}, "multiple of 16 B"),
    ({"box": (32, 64), "swizzle": 128, "shape": (100, 64)}, "at most 32 elements \\(128 B is the widest swizzle\\)"),
    ({"box": (32, 32), "swizzle": 64, "shape": (100, 64)}, "at most 16 elements or use a wider swizzle"),
    ({"swizzle": 96}, "use 0 \\(none\\), 32, 64 or 128"),
    ({"box": (32,)}, "box has 1 dimension but"),
    ({"strides": (256,)}, "strides_bytes has 1 entries"),
    ({"element_strides": (1,)}, "element_strides has 1 entries"),
    ({"dtype": np.int8}, "no TMA data type"),
    ({"oob_fill": "nan", "dtype": np.int32}, "floating-point"),
    ({"element_strides": (1, 9)}, "element stride"),
    ({"element_strides": (0, 1)}, "element stride"),
    ({"shape": (2**32 + 1, 64)}, "1 to 2\\^32"),
    ({"shape": (0, 64)}, "1 to 2\\^32"),
    ({"shape": (4, 64), "strides": (2**40, 4)}, "below 2\\^40"),
    ({"l2_promotion": 32}, "l2_promotion"),
    ({"shape": (1024,), "box": (32,), "strides": (4,)}, "rank 1: describe the vector as a 1 x 1024"),
])
def test_each_rule_has_its_own_message(kw, message):
    with pytest.raises(fb.TensorMapError, match=message):
        rules(**kw)


def test_array_mistakes_are_clear_errors():
    a = fb.empty((8, 64), fb.bfloat16)
    cases = [
        (lambda: fb.tensor_map(np.zeros((8, 64), np.float32), (8, 8)), "numpy array"),
        (lambda: fb.tensor_map([[1.0]], (1, 8)), "device array"),
        (lambda: fb.tensor_map(a, (8, 64), strides_bytes=(128,)), "strides_bytes has 1 entries"),
        (lambda: fb.tensor_map(a, (4, 32), shape=(4, 32), strides_bytes=(256, 4)), "innermost stride is 4 B"),
        (lambda: fb.tensor_map(a, (8, 64), shape=(9, 64)), "past the allocation"),
        (lambda: fb.tensor_map(a, (8, 64), shape=(8, 64), strides_bytes=(144, 2)), "past the allocation"),
        (lambda: fb.tensor_map(a, (8, 64), element_strides=(1,)), "element_strides has 1 entries"),
        (lambda: fb.tensor_map(a, (8.0, 64)), "whole number of elements, an int: box=\\(8, 64\\)"),
        (lambda: fb.tensor_map(a, (8.5, 64)), "whole number of elements, an int$"),
        (lambda: fb.tensor_map(a, (True, 64)), "whole number of elements, an int$"),
    ]
    for make, message in cases:
        with pytest.raises(fb.TensorMapError, match=message):
            make()


def test_a_padded_buffer_viewed_as_a_smaller_tensor():
    buf = fb.empty((100, 104), fb.bfloat16)            # 100 columns used, rows padded to 208 B
    tm = fb.tensor_map(buf, (64, 64), shape=(100, 100), strides_bytes=(208, 2), swizzle=128)
    assert tm.shape == (100, 100) and tm.box_bytes == 64 * 64 * 2


def test_tensor_map_on_an_array_reports_box_bytes():
    a = fb.empty((128, 64), fb.bfloat16)
    tm = fb.tensor_map(a, (64, 64), swizzle=128)
    assert tm.box_bytes == 64 * 64 * 2
    assert (tm.raw is not None) == (fb.gpu() is not None)


# ---- driver agreement -------------------------------------------------------------------------------
BF, F32, U8, F64, I32, F16 = fb.bfloat16, np.float32, np.uint8, np.float64, np.int32, np.float16


def _case(shape, dtype, box, strides=None, off=0, **kw):
    itemsize = np.dtype(dtype).itemsize
    if strides is None:
        strides, s = [], itemsize
        for n in reversed(shape):
            strides.append(s)
            s *= n
        strides = tuple(reversed(strides))
    return dict(shape=tuple(shape), dtype=dtype, box=tuple(box), strides=tuple(strides), off=off, kw=kw)


AGREEMENT = [
    # legal, including every box larger than the tensor
    _case((100, 64), F32, (32, 32)),
    _case((8, 64), BF, (128, 64), swizzle=128),
    _case((100, 64), BF, (128, 64), swizzle=128),
    _case((1000, 32), BF, (128, 64), swizzle=128, strides=(64, 2)),
    _case((1, 8), BF, (256, 64), swizzle=128),
    _case((1, 1), F32, (1, 4)),
    _case((7, 4104), BF, (128, 64), swizzle=128),
    _case((3, 5, 7, 9, 16), F32, (2, 2, 2, 2, 4)),
    _case((64, 64), U8, (16, 16)),
    _case((64, 64), F64, (8, 2)),
    _case((64, 64), F16, (64, 16), swizzle=32),
    _case((64, 64), F16, (64, 32), swizzle=64),
    _case((100, 64), F32, (32, 32), off=16),
    _case((100, 64), F32, (32, 32), element_strides=(2, 1)),
    _case((100, 64), F32, (32, 32), element_strides=(1, 2)),
    _case((100, 64), F32, (32, 32), element_strides=(8, 8)),
    _case((100, 64), BF, (32, 64), oob_fill="nan"),
    _case((100, 64), F64, (32, 8), oob_fill="nan"),
    _case((100, 64), F32, (32, 32), l2_promotion=256),
    _case((2**32, 8), U8, (8, 16), strides=(16, 1)),
    _case((4, 64), F32, (4, 32), strides=(2**40 - 16, 4)),
    _case((100, 64), F32, (32, 32), strides=(16, 4)),        # rows overlap: a stride below the row size
    _case((100, 64), F32, (32, 32), strides=(0, 4)),         # every row the same row
    _case((4, 100, 64), F32, (2, 32, 32), strides=(256, 256, 4)),   # outer stride below inner extent
    _case((256, 256), BF, (256, 256)),
    # illegal
    _case((100, 64), F32, (32, 32), off=8),
    _case((100, 64), F32, (32, 32), off=4),
    _case((300, 300), BF, (64, 64)),                          # 600 B rows
    _case((100, 64), F32, (32, 32), strides=(264, 4)),
    _case((100, 64), F32, (32, 257)),
    _case((100, 64), F32, (0, 32)),
    _case((100, 64), F32, (32, 2)),
    _case((100, 64), U8, (32, 8)),
    _case((100, 64), BF, (64, 128), swizzle=128),
    _case((64, 64), F16, (64, 32), swizzle=32),
    _case((64, 64), F16, (64, 64), swizzle=64),
    _case((100, 64), I32, (32, 32), oob_fill="nan"),
    _case((100, 64), U8, (32, 32), oob_fill="nan"),
    _case((100, 64), F32, (32, 32), element_strides=(1, 9)),
    _case((100, 64), F32, (32, 32), element_strides=(0, 1)),
    _case((2**32 + 1, 8), U8, (8, 16), strides=(16, 1)),
    _case((4, 64), F32, (4, 32), strides=(2**40, 4)),
    _case((1024,), F32, (32,)),                              # rank 1: refused (see tensormap.MIN_RANK)
    _case((64,), BF, (64,), swizzle=128),
    # the same data as 1 x n: accepted
    _case((1, 1024), F32, (1, 32)),
    _case((1, 64), F32, (1, 256)),
]


def _ours(c, address):
    try:
        check_rules(c["shape"], c["dtype"], c["strides"], c["box"], address=address, **c["kw"])
        return "accept", ""
    except fb.TensorMapError as e:
        return "refuse", str(e)


def test_the_driver_agrees_with_every_rule(gpu90):
    base = fb.empty(1 << 20, np.uint8)
    rows, bad = [], []
    for c in AGREEMENT:
        address = base.ptr + c["off"]
        ours, why = _ours(c, address)
        theirs = encode_result(c["shape"], c["dtype"], c["strides"], c["box"], address=address, **c["kw"])
        agree = (ours == "accept") == (theirs == "CUDA_SUCCESS")
        desc = (f"{'x'.join(map(str, c['shape']))} {np.dtype(c['dtype'])} box {'x'.join(map(str, c['box']))} "
                f"strides {c['strides']} +{c['off']} {c['kw'] or ''}")
        rows.append(f"{'agree   ' if agree else 'DISAGREE'} ours={ours:6s} driver={theirs:26s} {desc}")
        if not agree:
            bad.append(rows[-1] + (f"  ({why})" if why else ""))
    print("\n".join(rows))
    print(f"driver agreement: {len(rows) - len(bad)} of {len(rows)} cases agree")
    assert not bad, "check_rules and cuTensorMapEncodeTiled disagree:\n" + "\n".join(bad)


def test_every_agreement_case_has_both_answers():
    # The grid must exercise both answers, or the agreement test could not fail.
    answers = {_ours(c, 0x10000 + c["off"])[0] for c in AGREEMENT}
    assert answers == {"accept", "refuse"}


def test_a_map_is_checked_however_it_is_made_and_cannot_be_changed():
    """The rules run when a map is made, by fb.tensor_map, by its constructor or by dataclasses.replace (a map made
    with no swizzle, then replaced with a 128-byte swizzle its 256-byte rows cannot take, is refused); its numbers are
    plain ints, and it cannot be changed afterwards."""
    import dataclasses
    from feedbeast.tensormap import TensorMap, TensorMapError
    ok = TensorMap((64, 128), np.dtype(np.float32), (32, 64), (512, 4), 0, "zero", 0, (1, 1))
    with pytest.raises(TensorMapError, match="128 B swizzle"):
        dataclasses.replace(ok, swizzle=128)
    with pytest.raises(TensorMapError, match="not a multiple of 16"):
        TensorMap((1, 1), np.dtype(np.uint8), (16, 16), (3, 1), 0, "zero", 0, (1, 1))

    class Lies(int):
        def __ne__(self, other):
            return False
    m = TensorMap((64, 32), np.dtype(np.float32), (32, 32), (128, 4), Lies(0), "zero", 0, (1, 1))
    assert type(m.swizzle) is int and m.swizzle != 128
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.swizzle = 128


def test_a_launch_takes_only_the_toolkit_s_own_tensor_map():
    """A class of the learner's named TensorMap could compute `raw` while the launch packs it (writing the right
    answer into the output first): the launch refuses it by name, on any machine."""
    import importlib
    launch = importlib.import_module("feedbeast.launch")
    import dataclasses
    m = fb.tensor_map(fb.empty((64, 64), np.float32), box=(32, 32))
    assert launch._is_tensor_map(m) and not launch._is_tensor_map(np.zeros(2))

    class TensorMap(fb.TensorMap):
        @property
        def raw(self):
            return bytes(128)

        @raw.setter
        def raw(self, value):
            pass
    with pytest.raises(fb.LaunchError, match="not a class of your own"):
        launch._is_tensor_map(TensorMap(**{f.name: getattr(m, f.name) for f in dataclasses.fields(m)}))


def test_a_gpu_without_tma_whose_driver_refuses_the_map_gets_a_placeholder(monkeypatch):
    """Labs 05, 07, 09 and 10 build their maps before their launches are skipped: on an RTX 3060 (sm_86) a driver
    that refuses to encode one leaves a placeholder (no kernel there can read it); on a Hopper the refusal is an
    error, as the driver's word is."""
    from feedbeast import device, tensormap
    from feedbeast.errors import FeedbeastError

    def refuse(tm, address):
        raise FeedbeastError("CUDA driver error CUDA_ERROR_NOT_SUPPORTED: operation not supported")
    monkeypatch.setattr(tensormap, "_encode", refuse)
    rtx = device.Gpu(0, "NVIDIA GeForce RTX 3060 Laptop GPU", (8, 6), 30, 101376, 49152, 102400, 3 << 20, 1702, 7001,
                     192, 13000, (13, 0), 6 << 30)
    monkeypatch.setattr(device, "gpu", lambda index=0: rtx)
    assert tensormap._encode_here(None, 0x1000) is None
    h100 = dataclasses.replace(rtx, name="NVIDIA H100 80GB HBM3", cc=(9, 0))
    monkeypatch.setattr(device, "gpu", lambda index=0: h100)
    with pytest.raises(FeedbeastError, match="CUDA_ERROR_NOT_SUPPORTED"):
        tensormap._encode_here(None, 0x1000)
