"""check(): float64 reference, thresholds by dtype, poison and NaN never pass."""
import re
import sys

import numpy as np
import pytest

import feedbeast as fb
from feedbeast.check import tolerance_for


def ref_and_out(dtype, shape=(37, 53), seed=0):
    ref = fb.random(shape, np.float64, seed=seed)
    return ref, ref.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, fb.bfloat16])
def test_rounded_reference_passes(dtype):
    ref, out = ref_and_out(dtype)
    r = fb.check(out, ref)
    assert r.passed and r.rel_error <= tolerance_for(dtype)


def test_wrong_element_fails_and_is_named():
    ref, out = ref_and_out(np.float32)
    out[5, 7] += 0.5
    with pytest.raises(fb.CheckFailed) as e:
        fb.check(out, ref)
    assert "at (5, 7)" in str(e.value)


def test_unwritten_poison_fails_even_if_tiny():
    ref, out = ref_and_out(np.float32, (64, 64))
    out.view(np.uint32)[63, 63] = 0xFFFFFFFF
    r = fb.check(out, ref, raise_on_fail=False)
    assert not r.passed and r.n_bad == 1 and "never written" in r.detail and "(63, 63)" in r.detail


def test_nan_fails():
    ref, out = ref_and_out(np.float32)
    out[0, 0] = np.nan
    r = fb.check(out, ref, raise_on_fail=False)
    assert not r.passed and "NaN" in r.detail


def test_bf16_error_over_threshold_fails_under_passes():
    ref, _ = ref_and_out(np.float64)
    noisy = (ref * (1 + 0.05 * np.random.default_rng(1).standard_normal(ref.shape))).astype(fb.bfloat16)
    assert not fb.check(noisy, ref, raise_on_fail=False).passed
    assert fb.check(ref.astype(fb.bfloat16), ref).passed


def test_tf32_tolerance_by_name_and_unknown_name():
    ref, out = ref_and_out(np.float32)
    out = (out * (1 + 1e-4)).astype(np.float32)
    assert not fb.check(out, ref, raise_on_fail=False).passed
    assert fb.check(out, ref, tol="tf32").passed
    with pytest.raises(ValueError, match="unknown tolerance"):
        fb.check(out, ref, tol="fp8")


def test_a_tolerance_or_an_array_that_is_none_of_those_is_said_before_any_skip():
    """tol=[1e-3] ran at the default limit, tol=-1 failed every output, check(None, ref) (a launch's result handed
    over) spoke of shapes: each is now one message, also when the launch was skipped."""
    ref, out = ref_and_out(np.float32)
    for tol, said in (([1e-3], "give one number"), ((1e-3, 1e-5), "give one number"), (-1, "relative error >= 0"),
                      (True, "give one number")):
        with pytest.raises(ValueError, match=re.escape(f"tol={tol!r}: ") + ".*" + re.escape(said)):
            fb.check(out, ref, tol=tol)
        with pytest.raises(ValueError):
            fb.check(fb.empty(ref.shape, np.float32), ref, tol=tol, after=fb.Skipped("no GPU", "k"))
    assert fb.check(out, ref, tol=np.float32(1e-3)).passed
    with pytest.raises(TypeError, match="out is None, not an array: pass the array the kernel wrote"):
        fb.check(None, ref)
    with pytest.raises(TypeError, match="ref is None, not an array"):
        fb.check(out, None)


def test_shape_and_reference_dtype_mismatch():
    ref, out = ref_and_out(np.float32)
    with pytest.raises(fb.CheckFailed, match="shape"):
        fb.check(out[:, :-1], ref)
    with pytest.raises(fb.CheckFailed, match="compute it in float64"):
        fb.check(out, ref.astype(np.float32))


def test_integers_are_exact():
    ref = np.arange(100, dtype=np.int64)
    out = ref.astype(np.int32)
    assert fb.check(out, ref).passed
    out[3] = 4
    assert not fb.check(out, ref, raise_on_fail=False).passed


def test_placeholder_array_without_gpu_is_skipped_not_passed():
    if fb.gpu() is not None:
        pytest.skip("skipped: this machine has a GPU; the no-GPU path is tested on CPU machines")
    out = fb.empty((4, 4))
    r = fb.check(out, np.ones((4, 4)))
    assert isinstance(r, fb.Skipped) and not r and "needs a GPU" in str(r)


def test_a_device_array_of_the_wrong_shape_or_a_float32_reference_fails_on_every_machine():
    """The shape and dtype of a device array are known without a GPU: check says what is wrong before any skip."""
    with pytest.raises(fb.CheckFailed, match=r"shape \(10,\) but the reference has \(12,\)"):
        fb.check(fb.empty(10, np.float32), np.ones(12))
    with pytest.raises(fb.CheckFailed, match="compute it in float64"):
        fb.check(fb.empty(10, np.float32), np.ones(10, np.float32))
    with pytest.raises(fb.CheckFailed, match="cannot compare an output of dtype"):
        fb.check(fb.empty(3, np.complex64), np.ones(3))


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8, np.uint32, np.float32, fb.bfloat16])
def test_random_data_has_no_zeros_in_any_dtype(dtype):
    x = fb.random(4096, dtype, seed=1)
    assert x.dtype == np.dtype(dtype) and not (x.astype(np.float64) == 0).any()
    assert len(np.unique(x.astype(np.float64))) > 50           # random, not a constant


def test_random_integers_take_every_nonzero_value_of_their_range_alike():
    x = fb.random(200_000, np.int8, low=-2, high=3, seed=1)
    values, counts = np.unique(x, return_counts=True)
    assert values.tolist() == [-2, -1, 1, 2] and counts.min() > 0.9 * counts.max()
    assert np.unique(fb.random(100_000, np.int32, low=0, high=2)).tolist() == [1]     # 0 is never drawn
    for kw, says in ((dict(low=0, high=1), "holds no nonzero integer"),):
        with pytest.raises(ValueError, match=says):
            fb.random(3, np.int32, **kw)
    with pytest.raises(ValueError, match="no negative values"):
        fb.random(3, np.uint8, low=-5)
    with pytest.raises(ValueError, match="all True"):
        fb.random(3, bool)


def test_random_floats_are_the_seeded_uniform_draw():
    """Kept as before for floats: a seed gives the same inputs, so recorded runs stay comparable."""
    want = np.random.default_rng(5).uniform(-1, 1, size=(3, 4)).astype(np.float32)
    assert np.array_equal(fb.random((3, 4), np.float32, seed=5), want)


@pytest.mark.parametrize("shape", [-1, (3, -2), 2.5, (4, 1.0)])
def test_empty_refuses_a_size_that_is_not_a_whole_number(shape):
    with pytest.raises(ValueError, match="whole number >= 0"):
        fb.empty(shape, np.float32)


def test_gpu_a_store_past_the_last_element_fails_the_check(anygpu):
    """fb.empty allocates poisoned guard bytes after the last element: a kernel whose loop bound is one too far
    (it writes y[n]) fails its check, naming the bytes past the end; the same kernel within bounds passes."""
    mod = fb.compile('extern "C" __global__ void fill(float* y, int n, int over) {\n'
                     '  for (int i = threadIdx.x; i < n + over; i += blockDim.x) y[i] = 1.0f + i;\n}\n')
    for n in (3, 1000):
        ok, over = fb.empty(n, np.float32), fb.empty(n, np.float32)
        assert ok.guard == fb.memory.GUARD_BYTES
        ref = 1.0 + np.arange(n, dtype=np.float64)
        assert fb.check(ok, ref, after=mod.fill.launch(1, 128, ok, n, 0)).passed
        r = fb.check(over, ref, raise_on_fail=False, after=mod.fill.launch(1, 128, over, n, 1))
        assert not r.passed and "4 bytes after the last element were written (the first at +0)" in repr(r), repr(r)
        assert fb.check(over, ref, after=mod.fill.launch(1, 128, over, n, 0)).passed   # fixed, the same output
    zeroed = fb.empty(8, np.float32).fill_bytes(0)            # zeroed outputs keep their guard poisoned
    assert zeroed.overrun() == (0, 0) and fb.to_device(np.ones(4, np.float32)).guard == 0


class _Viewed:
    """An array of another library on the GPU: only its __cuda_array_interface__ and a host copy."""
    def __init__(self, ptr, shape, typestr="<f4", strides=None, host=None):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (ptr, False), "version": 3,
                                         "strides": strides}
        self.host = host

    def copy_to_host(self):
        return self.host


def test_a_view_of_a_guarded_output_is_checked_as_that_output():
    """fbn.device_or_host's outputs are Numba views of a guarded fb.empty: check() finds the guard behind a view of
    the whole array as it is (same address, shape and element type, C order) and nothing else: a slice, a reshaped,
    transposed or retyped view is compared through its host copy (its own shape and type)."""
    from feedbeast.memory import _GUARDED, DeviceArray, guarded_view
    arr = DeviceArray((4, 3), np.float32, 0x7000, owner=False, guard=fb.memory.GUARD_BYTES)
    _GUARDED[arr.ptr] = arr
    try:
        assert guarded_view(_Viewed(0x7000, (4, 3))) is arr
        assert guarded_view(_Viewed(0x7000, (4, 3), strides=(12, 4))) is arr  # C order, strides spelt out
        assert guarded_view(_Viewed(0x7000, (12,))) is None                  # the same bytes, reshaped
        assert guarded_view(_Viewed(0x7000, (4, 3), typestr="<i4")) is None  # the same bytes as int32
        assert guarded_view(_Viewed(0x7000, (3, 4), strides=(4, 12))) is None  # a transposed view
        assert guarded_view(_Viewed(0x7000, (2, 3))) is None                # a slice
        assert guarded_view(_Viewed(0x7004, (11,))) is None                 # another address
        assert guarded_view(np.zeros(12, np.float32)) is None
        flat = np.arange(12, dtype=np.float32)
        r = fb.check(_Viewed(0x7000, (12,), host=flat), flat.astype(np.float64), name="reshaped view")
        assert r.passed, r                                                   # its own shape, not arr's (4, 3)
    finally:
        _GUARDED.pop(arr.ptr, None)


def test_check_takes_a_device_array_of_another_library():
    """An array with __cuda_array_interface__ that views no guarded output is compared through its host copy; one with
    no known way to the host is refused by name."""
    ref = np.arange(6, dtype=np.float64)
    good = _Viewed(0x9000, (6,), host=ref.astype(np.float32))
    assert fb.check(good, ref, name="viewed").passed
    bad = _Viewed(0x9000, (6,), host=ref.astype(np.float32) + 1)
    assert not fb.check(bad, ref, name="viewed", raise_on_fail=False).passed

    class Opaque:
        __cuda_array_interface__ = {"shape": (6,), "typestr": "<f4", "data": (0x9000, False), "version": 3}
    with pytest.raises(TypeError, match="no way known here to copy it to the host"):
        fb.check(Opaque(), ref)



class _TorchLike:
    """What PyTorch's GPU tensors of bf16 and fp8 do: `__cuda_array_interface__` raises (KeyError in older versions;
    RuntimeError for a tensor that requires grad); the rest of the tensor says what it is."""
    __module__ = "torch"

    def __init__(self, ptr, shape, dtype="torch.bfloat16", size=2, requires_grad=False):
        self.ptr, self.shape, self.dtype, self.size, self.requires_grad = ptr, shape, dtype, size, requires_grad

    @property
    def __cuda_array_interface__(self):
        if self.requires_grad:
            raise RuntimeError("Can't get __cuda_array_interface__ on Variable that requires grad.")
        raise KeyError(self.dtype)

    def is_contiguous(self):
        return True

    def element_size(self):
        return self.size

    def data_ptr(self):
        return self.ptr


def test_a_pytorch_tensor_that_gives_no_interface_is_read_from_the_tensor():
    """interface() is how the toolkit reads another library's GPU array (launch, check, the hazard check, profile). A
    PyTorch bf16 or fp8 tensor has no `__cuda_array_interface__` to give (numpy has no such type): it is described from
    the tensor, with ml_dtypes' type; one that requires grad is refused with what to do, as PyTorch refuses it; our
    own bf16 arrays' `<V2` reads as bf16; host objects have none."""
    import ml_dtypes
    from feedbeast.memory import interface
    got = interface(_TorchLike(0x5000, (3, 4)))
    assert got == {"ptr": 0x5000, "shape": (3, 4), "strides": None, "dtype": fb.bfloat16}
    fp8 = interface(_TorchLike(0x5100, (8,), dtype="torch.float8_e4m3fn", size=1))
    assert fp8["dtype"] == np.dtype(ml_dtypes.float8_e4m3fn)
    with pytest.raises(TypeError, match=r"requires grad: pass t\.detach\(\)"):
        interface(_TorchLike(0x5000, (3,), requires_grad=True))
    with pytest.raises(TypeError, match="torch.qint8: numpy has no such type"):
        interface(_TorchLike(0x5000, (3,), dtype="torch.qint8", size=1))
    assert interface(_Viewed(0x7000, (2,), typestr="<V2"))["dtype"] == fb.bfloat16
    assert interface(np.zeros(3)) is None and interface(3) is None

    class Other:                     # another library's error is its own, not hidden
        @property
        def __cuda_array_interface__(self):
            raise KeyError("x")
    with pytest.raises(KeyError):
        interface(Other())


def _whole_array(out, ref, limit, show=5):
    """What check() computes, written over whole arrays: the reference for its comparison in chunks."""
    out = np.asarray(out)
    unwritten = np.all(out.view(np.uint8).reshape(out.shape + (out.dtype.itemsize,)) == 0xFF, axis=-1)
    if out.dtype.kind in "iu":
        unwritten &= ref != -1
    got = out.astype(np.float64)
    nan = np.isnan(got) & ~unwritten
    finite = ~(unwritten | nan)
    diff = np.where(finite, np.abs(got - ref), 0.0)
    rel = np.linalg.norm(diff) / np.linalg.norm(ref)
    if (unwritten | nan).any():
        rel = np.inf
    far = max(limit, 1e-12) * np.abs(ref).max() * 10
    bad = unwritten | nan | (diff > far)
    order = sorted(np.flatnonzero(diff), key=lambda i: (-diff.flat[i], i))[:show]
    return rel, int(bad.sum()), [tuple(int(x) for x in np.unravel_index(i, out.shape)) for i in order]


@pytest.mark.parametrize("dtype", [np.float32, fb.bfloat16, np.int32])
def test_a_comparison_in_chunks_finds_what_one_over_the_whole_array_finds(monkeypatch, dtype):
    # A chunk of 1000 elements over 61 x 173 (10553): errors, poison and NaN on both sides of chunk edges, a
    # reference that is a transposed view (not contiguous), and the worst elements spread over several chunks.
    monkeypatch.setattr(sys.modules["feedbeast.check"], "CHUNK", 1000)   # fb.check is the function
    rng = np.random.default_rng(3)
    ints = np.dtype(dtype).kind == "i"
    base = rng.integers(-50, 50, (173, 61)) if ints else rng.uniform(-1, 1, (173, 61))
    ref = base.astype(np.float64).T
    out = np.ascontiguousarray(ref).astype(dtype)
    flat = [999, 1000, 1001, 4321, 9999, 10552]
    for k, i in enumerate(flat):
        r, c = np.unravel_index(i, out.shape)
        out[r, c] = out[r, c] + (7 + k if ints else 0.25 * (k + 1))
    if not ints:
        out[0, 999 % 61] = np.nan
    poison = out.view(np.uint8).reshape(out.shape + (out.dtype.itemsize,))
    poison[0, 3] = poison[60, 172] = 0xFF
    res = fb.check(out, ref, raise_on_fail=False)
    rel, n_bad, worst = _whole_array(out, ref, tolerance_for(dtype))
    assert not res.passed and res.rel_error == rel and res.n_bad == n_bad
    assert [tuple(int(x) for x in ln.split("at (")[1].split(")")[0].split(", "))
            for ln in res.detail.splitlines() if ln.startswith("  at (")] == worst
    assert f"2 of {out.size} elements were never written (still poison), first at (0, 3), (60, 172)" in res.detail
    # without the poison and the NaN the error is finite, and the same sum of squares
    good = np.ascontiguousarray(ref).astype(dtype)
    good[5, 5] = good[5, 5] + (1 if ints else 0.5)
    res = fb.check(good, ref, raise_on_fail=False)
    rel, n_bad, worst = _whole_array(good, ref, tolerance_for(dtype))
    assert res.rel_error == pytest.approx(rel, rel=1e-12) and res.n_bad == n_bad == 1 and "at (5, 5)" in res.detail


def test_tied_errors_are_named_from_the_first_and_a_complex_reference_is_refused(monkeypatch):
    monkeypatch.setattr(sys.modules["feedbeast.check"], "CHUNK", 100)
    out = np.zeros(1000, np.int32)
    out[::7] = 1
    res = fb.check(out, np.zeros(1000), raise_on_fail=False)
    assert [ln.split(":")[0].strip() for ln in res.detail.splitlines()] == [f"at ({i},)" for i in (0, 7, 14, 21, 28)]
    with pytest.raises(fb.CheckFailed, match="complex"):
        fb.check(np.zeros(1), np.array([1j]))


def test_numpy_reads_a_device_array_as_a_host_copy_or_says_why_it_cannot():
    """np.asarray(fb.empty(10)) was a 0-d object array, on every machine: numpy wrapped the object. It is the
    values (a copy, as to_host()), or, without a GPU, to_host()'s error."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    dev = fb.to_device(x)
    if fb.gpu() is None:
        with pytest.raises(fb.FeedbeastError, match="no GPU on this machine: this array was never on a device"):
            np.asarray(dev)
    else:
        got = np.asarray(dev)
        assert got.shape == (2, 3) and got.dtype == np.float32 and (got == x).all()
        assert np.asarray(dev, dtype=np.float64).dtype == np.float64
        with pytest.raises(ValueError, match="only as a copy"):
            np.asarray(dev, copy=False)


def test_tally_takes_a_verdict_and_check_ring_its_step_functions():
    """fb.tally('x', 'False') passed and an array raised numpy's ambiguity error; check_ring given producer(ring, 0)
    (its result), no consumer with the default init (reported as the learner's mbarrier misuse) or stages=2.0:
    one message each."""
    import numpy as np
    from feedbeast.sim.checker import check_ring
    for passed in ("False", np.array([True, False])):
        with pytest.raises(TypeError, match="give True or False"):
            fb.tally("x", passed)
    assert fb.tally("x", np.bool_(True)).passed and fb.tally("x", np.array([True])).passed

    def producer(ring, i):
        yield ring.full[0].arrive()

    def consumer(ring, i):
        yield None
    with pytest.raises(TypeError, match=r"give the step function itself .* not its result, producer\(ring, 0\)"):
        check_ring(producer(None, 0), [consumer])
    with pytest.raises(ValueError, match=r"consumers=\[\]: give at least one consumer step function"):
        check_ring(producer, [])
    with pytest.raises(ValueError, match="stages=2.0: a whole number >= 1"):
        check_ring(producer, [consumer], stages=2.0)


def test_an_output_of_the_wrong_shape_is_a_verdict_when_failures_are_collected():
    """raise_on_fail=False collects a wrong shape as a failed result (raised otherwise); a float64 difference below
    six digits is shown with the digits that differ."""
    r = fb.check(np.ones(3, np.float32), np.ones(4), raise_on_fail=False)
    assert not r and "output has shape (3,) but the reference has (4,)" in repr(r), repr(r)
    with pytest.raises(fb.CheckFailed, match=r"output has shape \(3,\) but the reference has \(4,\)"):
        fb.check(np.ones(3, np.float32), np.ones(4))
    r = fb.check(np.array([2.0000001]), np.array([2.0]), raise_on_fail=False)
    assert "got 2.0000001, expected 2 " in repr(r), repr(r)
