#!/usr/bin/env python3
"""CuPy on hipmem's pools: every CuPy allocation through libhipmem.

    import cupy_allocator
    cupy_allocator.use_hipmem("path/to/libhipmem.so")   # before CuPy allocates

Each allocation is hipMallocAsync on CuPy's current stream (the current
device's pool, in that stream's order); each free is hipFreeAsync on the same
stream while CuPy still has it, else on the stream current at the free. CuPy's
streams are made by the CUDA runtime, outside hipmem: libhipmem adopts each
on first use (the driver checks it is a live stream of the device's primary
context) and keeps its pool state from then on. CuPy's null stream (0) and
per-thread default stream (2) are hipmem's null stream.

Run as a script for a small check on a GPU:

    HIPMEM_BACKEND=cuda python3 cupy_allocator.py --lib target/release/libhipmem.so

It allocates on the null stream and on a stream of CuPy's own, checks the
data, and prints the pool's statistics (hipmem_torch_stats). Compiling it
(`python3 -m py_compile cupy_allocator.py`) needs neither CuPy nor a GPU.
"""

import argparse
import ctypes
import os
import sys
import weakref

_lib = None


class PoolStats(ctypes.Structure):
    """hipmemPoolStats: the device's current pool, in bytes."""

    _fields_ = [(name, ctypes.c_uint64) for name in
                ("reserved_current", "reserved_high", "used_current", "used_high")]


def _load(path):
    lib = ctypes.CDLL(path)
    lib.hipSetDevice.argtypes = [ctypes.c_int]
    lib.hipSetDevice.restype = ctypes.c_int
    lib.hipMallocAsync.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_void_p]
    lib.hipMallocAsync.restype = ctypes.c_int
    lib.hipFreeAsync.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.hipFreeAsync.restype = ctypes.c_int
    lib.hipGetErrorName.argtypes = [ctypes.c_int]
    lib.hipGetErrorName.restype = ctypes.c_char_p
    lib.hipmem_torch_stats.argtypes = [ctypes.c_int, ctypes.POINTER(PoolStats)]
    lib.hipmem_torch_stats.restype = ctypes.c_int
    return lib


def _error(lib, code, what):
    name = lib.hipGetErrorName(code).decode()
    return MemoryError(f"hipmem: {what} failed: {name} ({code})")


def _free(lib, ptr, stream_ref, device_id):
    """The finalizer: hipFreeAsync on the allocation's stream if CuPy still
    has it (a stream CuPy destroyed must never reach the driver), else on
    the stream current now."""
    import cupy

    stream = stream_ref()
    if stream is None:
        stream = cupy.cuda.get_current_stream()
    lib.hipSetDevice(device_id)
    code = lib.hipFreeAsync(ctypes.c_void_p(ptr), ctypes.c_void_p(stream.ptr))
    if code != 0:
        # A finalizer cannot raise; say what went wrong.
        print(_error(lib, code, f"hipFreeAsync({ptr:#x})"), file=sys.stderr)


class _Allocation:
    """Stands for one hipMallocAsync block (see hipmem_malloc)."""


def hipmem_malloc(size):
    """The allocator function for cupy.cuda.set_allocator: `size` bytes on
    the current device, in the order of CuPy's current stream."""
    import cupy

    lib = _lib
    device_id = cupy.cuda.Device().id
    stream = cupy.cuda.get_current_stream()
    ptr = ctypes.c_void_p()
    if size > 0:
        code = lib.hipSetDevice(device_id)
        if code != 0:
            raise _error(lib, code, f"hipSetDevice({device_id})")
        code = lib.hipMallocAsync(ctypes.byref(ptr), size, ctypes.c_void_p(stream.ptr))
        if code != 0:
            raise _error(lib, code, f"hipMallocAsync({size} bytes)")
    # The owner CuPy's memory object keeps alive: its finalizer frees the
    # block once the last array on it is gone.
    owner = _Allocation()
    if ptr.value:
        weakref.finalize(owner, _free, lib, ptr.value, weakref.ref(stream), device_id)
    mem = cupy.cuda.UnownedMemory(ptr.value or 0, size, owner, device_id)
    return cupy.cuda.MemoryPointer(mem, 0)


def use_hipmem(lib_path):
    """Makes libhipmem CuPy's allocator (call before CuPy allocates)."""
    global _lib
    import cupy

    os.environ.setdefault("HIPMEM_BACKEND", "cuda")
    _lib = _load(lib_path)
    cupy.cuda.set_allocator(hipmem_malloc)


def pool_stats(device_id=0):
    """The current pool's statistics of a device, as a dict."""
    s = PoolStats()
    code = _lib.hipmem_torch_stats(device_id, ctypes.byref(s))
    if code != 0:
        raise _error(_lib, code, "hipmem_torch_stats")
    return {name: getattr(s, name) for name, _ in PoolStats._fields_}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lib", default="target/release/libhipmem.so", help="path to libhipmem.so")
    args = parser.parse_args()
    use_hipmem(args.lib)
    import cupy

    a = cupy.arange(1 << 20, dtype=cupy.float32)           # null stream
    side = cupy.cuda.Stream(non_blocking=True)              # made by the CUDA runtime
    with side:
        b = cupy.empty_like(a)                              # hipMallocAsync on `side`
        b[...] = a * 2
        total = float(b.sum())
    side.synchronize()
    expected = float((cupy.arange(1 << 20, dtype=cupy.float64) * 2).sum())
    assert total == expected, (total, expected)
    print("data checked; pool:", pool_stats())
    del a, b
    cupy.cuda.Device().synchronize()
    print("after the frees; pool:", pool_stats())


if __name__ == "__main__":
    main()
