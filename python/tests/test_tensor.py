"""varq.Tensor: memory shared with numpy and torch without copies (the
buffer protocol, __array_interface__, DLPack both ways), dtypes and shapes,
the producer kept alive, copies where sharing cannot be."""
import gc
import sys

import numpy as np
import pytest

import varq


def addr(a):
    return a.__array_interface__["data"][0]


DTYPES = [np.float32, np.float64, np.int32, np.int64, np.bool_]


@pytest.mark.parametrize("dtype", DTYPES)
def test_numpy_round_trip_shares_memory(dtype):
    a = (np.arange(24).reshape(2, 3, 4) % 3).astype(dtype)
    t = varq.tensor(a)
    assert t.dtype == np.dtype(dtype).name
    assert t.shape == (2, 3, 4) and t.ndim == 3 and t.nbytes == a.nbytes
    assert t.__array_interface__["data"][0] == addr(a)
    b = t.numpy()
    assert addr(b) == addr(a) and b.dtype == a.dtype
    np.testing.assert_array_equal(b, a)
    assert addr(np.asarray(memoryview(t))) == addr(a)
    if dtype is np.bool_ and np.lib.NumpyVersion(np.__version__) < "1.25.0":
        return  # numpy takes DLPack's bool type (kDLBool) from 1.25 on
    c = np.from_dlpack(t)
    assert addr(c) == addr(a)
    np.testing.assert_array_equal(c, a)


def test_writes_are_seen_through_every_view():
    a = np.zeros(4, np.float32)
    t = varq.tensor(a)
    v = t.numpy()
    a[2] = 5
    assert v[2] == 5
    v[1] = 3
    assert a[1] == 3


def test_scalars_and_empty_arrays():
    s = varq.tensor(np.array(2.5))
    assert s.shape == () and s.numpy() == 2.5
    e = varq.tensor(np.zeros((3, 0), np.int32))
    assert e.shape == (3, 0) and e.numpy().size == 0


def test_the_producer_lives_as_long_as_the_tensor():
    a = np.arange(1000, dtype=np.float64)
    before = sys.getrefcount(a)
    t = varq.tensor(a)
    assert sys.getrefcount(a) == before + 1  # the buffer it holds
    del a
    gc.collect()
    junk = [np.full(1000, -1.0) for _ in range(50)]  # reuse of freed memory would show
    np.testing.assert_array_equal(t.numpy(), np.arange(1000, dtype=np.float64))
    del junk


def test_views_keep_the_tensor_alive():
    t = varq.tensor(np.arange(5, dtype=np.int64))
    v = t.numpy()
    d = np.from_dlpack(t)
    del t
    gc.collect()
    np.testing.assert_array_equal(v, np.arange(5))
    np.testing.assert_array_equal(d, np.arange(5))


def test_refcounts_come_back_after_many_wraps():
    a = np.ones((8, 8), np.float32)
    before = sys.getrefcount(a)
    for _ in range(10000):
        t = varq.tensor(a)
        np.from_dlpack(t)
        t.numpy()
    del t
    gc.collect()
    assert sys.getrefcount(a) == before


def test_non_contiguous_and_other_inputs_are_copied():
    a = np.arange(12, dtype=np.float32).reshape(3, 4).T
    t = varq.tensor(a)
    assert addr(t.numpy()) != addr(a)
    np.testing.assert_array_equal(t.numpy(), a)
    np.testing.assert_array_equal(varq.tensor([[1, 2], [3, 4]]).numpy(), [[1, 2], [3, 4]])
    assert varq.tensor([1.5]).dtype == "float64"


def test_unsupported_dtypes_are_refused():
    with pytest.raises(TypeError, match="complex64"):
        varq.tensor(np.zeros(3, np.complex64))
    with pytest.raises(varq.InvalidArgument, match="dtype"):
        varq.from_dlpack(np.zeros(3, np.complex64))


def test_added_dtypes_round_trip_through_numpy():
    for dt in (np.float16, np.int8, np.uint8, np.int16, np.uint16, np.uint32, np.uint64):
        a = (np.arange(6) * 3 + 1).astype(dt).reshape(2, 3)
        t = varq.tensor(a)
        assert t.dtype == np.dtype(dt).name
        assert np.array_equal(np.asarray(t), a) and np.asarray(t).dtype == a.dtype


def test_from_dlpack_of_numpy_shares_memory():
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    t = varq.from_dlpack(a)
    assert t.__array_interface__["data"][0] == addr(a)
    assert t.shape == (2, 3) and t.dtype == "int32"
    with pytest.raises(varq.InvalidArgument, match="contiguous"):
        varq.from_dlpack(a.T)


def test_dlpack_capsules_legacy_and_versioned():
    t = varq.tensor(np.arange(3, dtype=np.float32))
    legacy = t.__dlpack__()
    assert "dltensor" in repr(legacy) and "versioned" not in repr(legacy)
    versioned = t.__dlpack__(max_version=(1, 0))
    assert "dltensor_versioned" in repr(versioned)
    assert t.__dlpack_device__() == (1, 0)
    # a versioned capsule is taken back by varq itself; unused ones free
    # their reference when they go
    back = varq.from_dlpack(versioned)
    np.testing.assert_array_equal(back.numpy(), [0, 1, 2])
    assert back.__array_interface__["data"][0] == t.__array_interface__["data"][0]
    del legacy
    with pytest.raises(varq.InvalidArgument, match="capsule"):
        varq.from_dlpack(versioned)  # already used


def test_torch_shares_memory_both_ways():
    import torch

    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    t = varq.tensor(x)
    assert t.__array_interface__["data"][0] == x.data_ptr()
    assert t.shape == (3, 4) and t.dtype == "float32"
    y = torch.from_dlpack(t)
    assert y.data_ptr() == x.data_ptr()
    x[0, 0] = 42
    assert y[0, 0].item() == 42 and t.numpy()[0, 0] == 42
    del x
    gc.collect()
    assert t.numpy()[2, 3] == 11  # the torch tensor lives on in t
    # (torch 1.13 exports no bool tensor through DLPack: "Bool type is not
    # supported by dlpack"; torch 2 does)
    for dt in (torch.float64, torch.int32, torch.int64):
        z = (torch.arange(6) % 2).to(dt)
        vz = varq.from_dlpack(z)
        assert vz.__array_interface__["data"][0] == z.data_ptr()
        assert torch.equal(torch.from_dlpack(vz), z)
    with pytest.raises(varq.InvalidArgument, match="contiguous"):
        varq.from_dlpack(torch.ones(3, 4).t())


def test_read_only_memory_stays_read_only():
    a = np.arange(4, dtype=np.float64)
    a.flags.writeable = False
    t = varq.tensor(a)
    assert t.__array_interface__["data"] == (addr(a), True)
    v = t.numpy()
    assert addr(v) == addr(a) and not v.flags.writeable
    with pytest.raises(ValueError):
        v[0] = 1
    b = varq.tensor(np.frombuffer(b"\0" * 16, np.int32))
    assert not b.numpy().flags.writeable
    assert varq.tensor(np.zeros(2)).numpy().flags.writeable
