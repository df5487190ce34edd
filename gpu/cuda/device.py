"""Decides, in one place, whether a CUDA device and CuPy are usable.

Importing this module never fails on a machine without a GPU; the answer is
computed once, on first use.
"""
from __future__ import annotations

import functools

BACKENDS = ("auto", "cpu", "cuda")


class NoCudaDevice(RuntimeError):
    """The CUDA backend was requested but no usable CUDA device is present."""


@functools.cache
def cuda_available() -> bool:
    """True when CuPy imports and sees at least one CUDA device."""
    try:
        import cupy  # noqa: F401
        from cupy.cuda import runtime
        return runtime.getDeviceCount() > 0
    except Exception:  # ImportError, CUDARuntimeError, driver mismatch
        return False


def cuda_executor_built() -> bool:
    """True once the CUDA executor ships (the GPU issue); until then `cuda` is refused."""
    try:
        from gpu.cuda import executor  # noqa: F401
    except ImportError:
        return False
    return True


def resolve_backend(requested: str) -> str:
    """Map ``auto|cpu|cuda`` to the executor that will run; refuse what cannot."""
    if requested not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {requested!r}")
    usable = cuda_available() and cuda_executor_built()
    if requested == "auto":
        return "cuda" if usable else "cpu"
    if requested == "cuda" and not usable:
        if not cuda_available():
            raise NoCudaDevice("backend 'cuda' requested but no CUDA device is available "
                               "(CuPy missing or no GPU); use --backend cpu or auto")
        raise NoCudaDevice("backend 'cuda' requested but this build has no CUDA executor yet; "
                           "use --backend cpu or auto")
    return requested


def device_memory_bytes(used: bool = False) -> int | None:
    """Bytes CuPy's default memory pool holds on the device (with `used`, only those in
    live arrays, without the freed blocks it keeps for reuse), or None without a device."""
    if not cuda_available():
        return None
    import cupy
    pool = cupy.get_default_memory_pool()
    return int(pool.used_bytes() if used else pool.total_bytes())
