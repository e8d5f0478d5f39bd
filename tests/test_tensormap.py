"""Tensor-map rules are checked before the driver call, each with a message naming the rule."""
import numpy as np
import pytest

import feedbeast as fb
from feedbeast.tensormap import check_rules


def rules(shape=(100, 64), dtype=np.float32, box=(32, 32), address=0x1000, strides=None, **kw):
    itemsize = np.dtype(dtype).itemsize
    strides = strides or (shape[-1] * itemsize, itemsize)
    check_rules(shape, dtype, strides, box, address=address, **kw)


def test_a_good_map_passes():
    rules()
    rules(dtype=fb.bfloat16, box=(64, 64), swizzle=128, strides=(128, 2))


@pytest.mark.parametrize("kw, message", [
    ({"address": 0x1008}, "not 16-byte aligned"),
    ({"shape": (100, 30), "box": (32, 30), "strides": (120, 4)}, "not a multiple of 16 B"),
    ({"box": (32, 300)}, "must be 1 to 256"),
    ({"shape": (20, 64), "box": (32, 32)}, "only 20 elements"),
    ({"box": (32, 2)}, "multiple of 16 B"),
    ({"box": (32, 64), "swizzle": 128, "shape": (100, 64)}, "spans only 128 B"),
    ({"swizzle": 96}, "use 0 \\(none\\), 32, 64 or 128"),
    ({"box": (32,)}, "box has 1 dimensions"),
    ({"dtype": np.int8}, "no TMA data type"),
    ({"oob_fill": "nan", "dtype": np.int32}, "floating-point"),
    ({"element_strides": (1, 9)}, "element stride"),
])
def test_each_rule_has_its_own_message(kw, message):
    with pytest.raises(fb.TensorMapError, match=message):
        rules(**kw)


def test_tensor_map_on_an_array_reports_box_bytes():
    a = fb.empty((128, 64), fb.bfloat16)
    tm = fb.tensor_map(a, (64, 64), swizzle=128)
    assert tm.box_bytes == 64 * 64 * 2
    assert (tm.raw is not None) == (fb.gpu() is not None)
