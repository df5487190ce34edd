"""The one loader of gpu/cuda/kernels/*.cu: built once per device, its compile left out of
the engine's clock (no batch is charged for NVRTC)."""
from __future__ import annotations

import numpy as np
import pytest

from gpu import clock

pytestmark = pytest.mark.gpu


def test_a_module_is_built_once_and_its_compile_counts_as_compiling():
    import cupy

    from gpu.cuda import loader

    cupy.clear_memo()                   # forget every module built so far
    before = clock.compile_seconds()
    first = loader.module("ranks")
    compiled = clock.compile_seconds() - before
    assert compiled > 0
    assert loader.module("ranks") is first
    assert clock.compile_seconds() - before == compiled    # the second ask built nothing


def test_a_kernel_is_looked_up_once_per_device():
    from gpu.cuda import loader

    first = loader.kernel("ranks", "set_edge_ranks")
    assert loader.kernel("ranks", "set_edge_ranks") is first
    assert first.attributes["max_threads_per_block"] > 0    # a kernel of the module


def test_a_compile_error_names_the_real_file(tmp_path, monkeypatch):
    import cupy

    from gpu.cuda import loader

    (tmp_path / "broken.cu").write_text('extern "C" __global__ void k() {\n  int x = ;\n}\n')
    monkeypatch.setattr(loader, "KERNEL_DIR", tmp_path)
    cupy.clear_memo()
    with pytest.raises(cupy.cuda.compiler.CompileException, match=r"broken\.cu\(2\)"):
        loader.module("broken")
    cupy.clear_memo()


def test_check_array_refuses_what_a_kernel_cannot_take():
    import cupy
    import numpy as np

    from gpu.cuda.loader import check_array

    good = cupy.zeros((4, 3), dtype=np.int32)
    check_array("good", good, np.int32, 2)
    check_array("good", good, "int32")
    with pytest.raises(TypeError, match="host: expected a device array, got ndarray"):
        check_array("host", np.zeros(3, dtype=np.int32), np.int32)
    with pytest.raises(TypeError, match="wide: expected int32, got int64"):
        check_array("wide", good.astype(np.int64), np.int32)
    with pytest.raises(ValueError, match="flat: expected 1 dimensions, got 2"):
        check_array("flat", good, np.int32, 1)
    with pytest.raises(ValueError, match="column: must be C-contiguous"):
        check_array("column", good[:, 1], np.int32)
    with pytest.raises(ValueError, match="transposed: must be C-contiguous"):
        check_array("transposed", good.T, np.int32, 2)


def test_a_prepared_launch_does_what_the_raw_call_does_and_follows_set_arguments():
    import cupy

    from gpu.cuda import match_launchers as ml

    # Two vertices' lists in a view's layout: 0 -> [1, 2], 1 -> [0], 2 -> [0].
    start = cupy.asarray(np.array([0, 2, 3], dtype=np.int64))
    deg = cupy.asarray(np.array([2, 1, 1], dtype=np.int32))
    nbr = cupy.asarray(np.array([1, 2, 0, 0], dtype=np.int32))
    nlab = cupy.zeros(4, dtype=np.int32)
    label = cupy.zeros(3, dtype=np.int32)
    us, vs = (cupy.asarray(np.array(a, dtype=np.int32)) for a in ([0, 0], [1, 2]))
    ranks = cupy.asarray(np.array([5, 7], dtype=np.int32))
    direct, prepared = cupy.zeros(4, dtype=np.int32), cupy.zeros(4, dtype=np.int32)
    ml.set_edge_ranks(start, deg, nbr, nlab, label, direct, us, vs, ranks, False)
    launch = ml.set_edge_ranks(start, deg, nbr, nlab, label, prepared, us, vs, ranks, False,
                               prepare=True)
    assert not prepared.any()       # prepared, not launched
    launch.launch(1, 256)
    assert prepared.tolist() == direct.tolist() == [5, 7, 5, 7]
    # One edge only, into another rank pool: the set count and array are what run.
    other = cupy.zeros(4, dtype=np.int32)
    launch.set("rank", other)
    launch.set("count", 1)
    launch.launch(1, 256)
    assert other.tolist() == [5, 0, 5, 0]
    assert launch.array("rank") is other
    with pytest.raises(TypeError, match="rank: expected a device array"):
        launch.set("rank", 3)
    with pytest.raises(TypeError, match="count: a prepared launch takes device arrays"):
        from gpu.cuda.loader import Prepared, kernel
        Prepared(kernel("ranks", "set_edge_ranks"), ("count",), (3,))


def test_a_reduction_compiles_once_whatever_the_length_of_its_array(monkeypatch):
    """No batch size reaches a reduction kernel that a smaller one did not compile (CuPy's
    CUB block reductions compiled one per size class: a large batch paid seconds)."""
    import cupy
    from cupy.cuda import compiler

    from gpu.cuda import loader  # noqa: F401  (sets CuPy's reduction accelerators)

    # A sum of booleans (as the batch checks count theirs) into a type nothing else here
    # asks for, so that its first kernel is built here; the arrays are made first.
    sizes = (3, 100, 1_000, 70_000)
    arrays = [cupy.arange(n) >= 0 for n in sizes]
    asked = []
    real = compiler._compile_module_with_cache

    def counting(*args, **kwargs):
        asked.append(args[0] if args else kwargs.get("source"))
        return real(*args, **kwargs)

    monkeypatch.setattr(compiler, "_compile_module_with_cache", counting)
    values = [int(a.sum(dtype=np.int32)) for a in arrays]
    assert values == list(sizes)
    assert len(asked) <= 1, f"{len(asked)} kernels built for one reduction"


def test_arrays_uploaded_together_come_back_equal_typed_and_alive_alone():
    import gc

    import cupy

    from gpu.cuda.loader import upload_together

    host = [np.array([1, 2**40, -3], dtype=np.int64), np.array([], dtype=np.uint64),
            np.arange(5, dtype=np.int32).reshape(5), np.array([7], dtype=np.int32)]
    parts = upload_together(*host)
    assert [(p.dtype, p.shape) for p in parts] == [(h.dtype, h.shape) for h in host]
    last = parts[-1]
    del parts
    gc.collect()
    cupy.get_default_memory_pool().free_all_blocks()
    cupy.zeros(64, dtype=np.int32)      # a new allocation must not take the part's memory
    assert last.tolist() == [7]
    again = upload_together(*host)
    for part, expected in zip(again, host, strict=True):
        assert np.array_equal(part.get(), expected)
    with pytest.raises(ValueError, match="wider types first"):
        upload_together(np.zeros(2, dtype=np.int32), np.zeros(2, dtype=np.int64))


def test_a_read_back_equals_get():
    import cupy

    from gpu.cuda.loader import read_back

    for array in (cupy.arange(1000, dtype=np.int32) * 3, cupy.zeros((0,), dtype=np.int64),
                  cupy.arange(12, dtype=np.uint64).reshape(3, 4)):
        got = read_back(array)
        assert got.dtype == array.dtype and got.shape == array.shape
        assert np.array_equal(got, array.get())
