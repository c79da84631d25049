"""hipmem as PyTorch's allocator, and its pool statistics, for the examples.

    import hipmem_torch                                   # examples/python/
    pool = hipmem_torch.use_hipmem("/path/to/libhipmem.so")   # before PyTorch allocates
                                 # (allocation, free, record_stream, empty_cache and
                                 # set_per_process_memory_fraction go to hipmem)
    ...
    s = pool.stats(device)       # reserved_current, reserved_high, used_current, used_high
    pool.reset_peak(device)      # the two High values start again from the current ones
    pool.empty_cache(device)     # one device's pool (torch.cuda.empty_cache() trims every device's)
    pool.plan_counts(device)     # learned layouts: plans, served, missed, ended, rejected
    pool.set_planning(device, False)   # learned layouts off (on by default)

PyTorch keeps no statistics for a pluggable allocator, so these read hipmem's
(`hipmem_torch_stats`, `hipmem_torch_reset_peak`, `hipmem_torch_empty_cache`).
"""

import ctypes
import os


class PoolStats(ctypes.Structure):
    """`hipmemPoolStats`: bytes the pool holds and bytes live, now and at most."""
    _fields_ = [(n, ctypes.c_uint64) for n in
                ("reserved_current", "reserved_high", "used_current", "used_high")]


class PlanCounts(ctypes.Structure):
    """`hipmemPlanCounts`: what the pool's learned layouts did."""
    _fields_ = [(n, ctypes.c_uint64) for n in ("plans", "served", "missed", "ended", "rejected")]


class Pool:
    """The statistics and cache calls of libhipmem's PyTorch interface."""

    def __init__(self, lib):
        self.hip = ctypes.CDLL(lib)

    def _check(self, what, rc):
        if rc != 0:
            raise RuntimeError(f"{what} failed: hipError_t {rc}")

    def stats(self, device):
        s = PoolStats()
        self._check("hipmem_torch_stats", self.hip.hipmem_torch_stats(device, ctypes.byref(s)))
        return s

    def reset_peak(self, device):
        self._check("hipmem_torch_reset_peak", self.hip.hipmem_torch_reset_peak(device))

    def empty_cache(self, device):
        self._check("hipmem_torch_empty_cache", self.hip.hipmem_torch_empty_cache(device))

    def _pool(self, device):
        pool = ctypes.c_void_p()
        self._check("hipDeviceGetMemPool", self.hip.hipDeviceGetMemPool(ctypes.byref(pool), device))
        return pool

    def plan_counts(self, device):
        """Learned layouts of `device`'s current pool: plans made, allocations
        served from a plan, planned ones that took the usual path, plans
        ended, candidate periods rejected (`hipmemPoolGetPlanCounts`)."""
        c = PlanCounts()
        self._check("hipmemPoolGetPlanCounts",
                    self.hip.hipmemPoolGetPlanCounts(self._pool(device), ctypes.byref(c)))
        return c

    def set_planning(self, device, on):
        """Turns learned layouts of `device`'s current pool on or off
        (`hipmemPoolSetPlanning`)."""
        self._check("hipmemPoolSetPlanning",
                    self.hip.hipmemPoolSetPlanning(self._pool(device), 1 if on else 0))


def use_hipmem(lib, record_stream=True):
    """Makes libhipmem PyTorch's CUDA allocator (call before PyTorch's first
    CUDA allocation; HIPMEM_BACKEND defaults to cuda); returns its Pool.

    PyTorch hands `tensor.record_stream(s)` to a pluggable allocator only
    through a function registered with `set_record_stream_fn`; without it the
    call is silently dropped, and memory still read on another stream can be
    reused by the stream that allocated it. `record_stream=False` leaves it
    unregistered (for comparison only)."""
    import torch

    lib = os.path.abspath(lib)
    os.environ.setdefault("HIPMEM_BACKEND", "cuda")
    alloc = torch.cuda.memory.CUDAPluggableAllocator(lib, "hipmem_torch_malloc", "hipmem_torch_free")
    native, dll = alloc.allocator(), ctypes.CDLL(lib)

    def address(name):
        return ctypes.cast(getattr(dll, name), ctypes.c_void_p).value

    if record_stream:
        if not hasattr(native, "set_record_stream_fn"):
            raise RuntimeError("this PyTorch cannot pass record_stream to a pluggable allocator "
                               "(no set_record_stream_fn); tensors used on several streams would "
                               "be reused too early")
        native.set_record_stream_fn(address("hipmem_torch_record_stream"))
    # torch.cuda.empty_cache() calls the allocator's reset function: hipmem's
    # trims every device's pool (without it, empty_cache does nothing).
    if hasattr(native, "set_reset_fn"):
        native.set_reset_fn(address("hipmem_torch_reset"))
    # torch.cuda.set_per_process_memory_fraction(f, device) calls the
    # allocator's memory-fraction function: hipmem's limits the device's pool
    # to f of the device's memory (without it, the fraction is ignored).
    if hasattr(native, "set_memory_fraction_fn"):
        native.set_memory_fraction_fn(address("hipmem_torch_set_memory_fraction"))
    torch.cuda.memory.change_current_allocator(alloc)
    return Pool(lib)
