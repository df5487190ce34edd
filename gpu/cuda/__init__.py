"""The CUDA executor: whether CUDA is usable (`device.py`, importable anywhere), the device
graph and signatures, the one `.cu` loader with typed launchers, and `kernels/*.cu`.

Only `device.py` may be imported on a machine without CuPy; the rest imports CuPy."""
