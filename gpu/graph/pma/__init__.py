"""The packed memory array: the device graph's edge store, on NumPy or CuPy.

    layout         edge keys, reserved values, `PMAConfig`, `PMAStats`, `PMAUpdateError`
    array          `PackedMemoryArray`: the structure, its reads, bulk load and checks
    update         the batch update on any array module (the reference), rebuilds
    device_update  the batch update on the kernels of gpu/cuda/kernels/pma.cu
    xp_ops         the array operations all of them are written in (NumPy and CuPy alike)
"""
