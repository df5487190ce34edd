"""gpu/kernel_cache.py: every cached kernel of the package is filed under a stamp of all its
source files, so a kernel whose callee's file changed is compiled again instead of loaded
stale from Numba's cache; and every module that defines cached kernels takes part."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from numba.core.dispatcher import Dispatcher

import gpu
from gpu.cpu import interpreted
from gpu.kernel_cache import PackageStampedLocator, code_stamp

REPO = Path(__file__).resolve().parents[2]


def test_the_stamp_follows_every_source_file(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "sub" / "b.py").write_text("y = 2\n")
    (tmp_path / "notes.txt").write_text("not a source\n")
    first = code_stamp(tmp_path)
    assert code_stamp(tmp_path) == first
    (tmp_path / "notes.txt").write_text("still not a source\n")
    assert code_stamp(tmp_path) == first
    b = tmp_path / "sub" / "b.py"
    os.utime(b, ns=(b.stat().st_atime_ns, b.stat().st_mtime_ns + 1))   # touched only
    assert code_stamp(tmp_path) != first


def test_every_cached_kernel_of_the_package_carries_its_stamp():
    import importlib
    import pkgutil
    for module in pkgutil.walk_packages(gpu.__path__, "gpu."):
        if not module.name.startswith("gpu.cuda"):      # CuPy's, not Numba's
            importlib.import_module(module.name)
    cached = [k for k in interpreted.kernels() if getattr(k, "_cache", None) is not None
              and isinstance(k, Dispatcher) and k._cache.__class__.__name__ == "FunctionCache"]
    assert len(cached) > 50
    stamp = code_stamp()
    for kernel in cached:
        locator = kernel._cache._impl.locator
        assert isinstance(locator, PackageStampedLocator), kernel.py_func.__module__
        assert locator.get_source_stamp() == stamp
        assert kernel._cache._cache_file._source_stamp == stamp


# A package of two modules: a kernel in a.py calls one in b.py.  Run once, b.py edited as
# an editor or `git pull` leaves it (a.py untouched), run again: the second run must see the
# edit.  With `stamped`, the package is one of the locator's roots.
_RUN = textwrap.dedent("""
    import sys
    from pathlib import Path
    root = Path(sys.argv[1])
    sys.path.insert(0, str(root.parent))
    if sys.argv[2] == "stamped":
        from gpu.kernel_cache import PackageStampedLocator
        PackageStampedLocator.roots.append(root)
    from pkgx.a import outer
    print(outer(1))
""")


def _package(tmp_path: Path) -> Path:
    root = tmp_path / "pkgx"
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "a.py").write_text(textwrap.dedent("""
        import numba as nb
        from pkgx.b import inner

        @nb.njit(cache=True)
        def outer(x):
            return inner(x) + 1
    """))
    (root / "b.py").write_text(textwrap.dedent("""
        import numba as nb

        @nb.njit(cache=True)
        def inner(x):
            return x * 10
    """))
    return root


def _run(root: Path, mode: str) -> int:
    env = {**os.environ, "PYTHONPATH": str(REPO), "NUMBA_CACHE_DIR": str(root.parent / "cache")}
    done = subprocess.run([sys.executable, "-c", _RUN, str(root), mode], env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1])


@pytest.mark.parametrize("mode", ["stamped", "numba's own"])
def test_an_edited_callee_is_compiled_again_not_loaded_stale(tmp_path, mode):
    root = _package(tmp_path)
    assert _run(root, mode) == 11
    b = root / "b.py"
    b.write_text(b.read_text().replace("x * 10", "x * 20"))
    if mode == "stamped":
        assert _run(root, mode) == 21
    else:       # what the stamp is for: Numba's own cache serves the stale kernel
        assert _run(root, mode) == 11
