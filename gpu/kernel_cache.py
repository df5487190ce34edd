"""Owns when a cached kernel is fresh: every kernel of the package is filed in Numba's cache
under a stamp of all the package's source files, not of its own file alone.

Numba keys each cached kernel by the modification time and size of the file that defines
it, and compiles a kernel's callees into it: a kernel whose callee in another file changed
loads stale machine code.  After an edit of gpu/cpu/search.py (as `git pull` on an editable
install makes), phases.count_small, in an unchanged file, kept the old search and counted
a directed query's batch wrong (7 matches, the oracle 6; 2026-11-27).  Numba documents the
limit; its remedy is clearing the cache by hand.  Here the locator of every kernel of this
package (PackageStampedLocator, first in Numba's list, found by the same rules as Numba's
own otherwise) stamps it with `code_stamp()`, so a change to any source file of the package
recompiles every kernel of it once, and nothing else changes: the cache's folders, Numba's
handling of stale entries (it ignores them, then overwrites them), other packages' kernels.

Each module that defines cached kernels imports this module first (its decorators choose a
locator when they run); tests/gpu/test_kernel_cache.py checks that every one does.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from numba.core import caching

ROOT = Path(__file__).resolve().parent


def code_stamp(root: Path = ROOT) -> str:
    """A digest of every Python source file under `root`: its path, size and modification
    time (what Numba's own stamp holds, for one file)."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        info = path.stat()
        digest.update(f"{path.relative_to(root)} {info.st_size} {info.st_mtime_ns}\n".encode())
    return digest.hexdigest()


class PackageStampedLocator(caching._CacheLocator):
    """Where Numba's next locator would cache a kernel of a package in `roots`, with that
    package's stamp in place of its file's."""

    roots: list[Path] = [ROOT]
    _stamps: dict[Path, str] = {}

    def __init__(self, inner: caching._CacheLocator, root: Path) -> None:
        self._inner, self._root = inner, root

    def ensure_cache_path(self) -> None:
        self._inner.ensure_cache_path()

    def get_cache_path(self) -> str:
        return self._inner.get_cache_path()

    def get_disambiguator(self) -> str:
        return self._inner.get_disambiguator()

    def get_source_stamp(self) -> str:
        # Once per process: the sources a process imported are the ones it compiles.
        stamp = self._stamps.get(self._root)
        if stamp is None:
            stamp = self._stamps[self._root] = code_stamp(self._root)
        return stamp

    @classmethod
    def from_function(cls, py_func, py_file):
        try:
            path = Path(py_file).resolve()
        except (OSError, ValueError):
            return None
        root = next((r for r in cls.roots if path.is_relative_to(r)), None)
        if root is None:
            return None
        for other in caching.CacheImpl._locator_classes:
            if other is not cls:
                inner = other.from_function(py_func, py_file)
                if inner is not None:
                    return cls(inner, root)
        return None


if PackageStampedLocator not in caching.CacheImpl._locator_classes:
    caching.CacheImpl._locator_classes.insert(0, PackageStampedLocator)
