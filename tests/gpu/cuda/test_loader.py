"""The one loader of gpu/cuda/kernels/*.cu: built once per device, its compile left out of
the engine's clock (no batch is charged for NVRTC)."""
from __future__ import annotations

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


def test_a_compile_error_names_the_real_file(tmp_path, monkeypatch):
    import cupy

    from gpu.cuda import loader

    (tmp_path / "broken.cu").write_text('extern "C" __global__ void k() {\n  int x = ;\n}\n')
    monkeypatch.setattr(loader, "KERNEL_DIR", tmp_path)
    cupy.clear_memo()
    with pytest.raises(cupy.cuda.compiler.CompileException, match=r"broken\.cu\(2\)"):
        loader.module("broken")
    cupy.clear_memo()
