"""hipmem as PyTorch's allocator, and its pool statistics, for the examples.

    import hipmem_torch                                   # examples/python/
    pool = hipmem_torch.use_hipmem("/path/to/libhipmem.so")   # before PyTorch allocates
                                 # (allocation, free, record_stream, empty_cache and
                                 # set_per_process_memory_fraction go to hipmem)
    pool = hipmem_torch.use_hipmem(lib, direct=True)   # the same, past the pluggable
                                 # allocator's map of live blocks (needs g++)
    ...
    s = pool.stats(device)       # reserved_current, reserved_high, used_current, used_high
    pool.reset_peak(device)      # the two High values start again from the current ones
    pool.empty_cache(device)     # one device's pool (torch.cuda.empty_cache() trims every device's)
    pool.plan_counts(device)     # learned layouts: plans, served, missed, ended, rejected
    pool.backend_calls(device)   # what the pool asked of the driver: physical allocations
                                 # created and released, maps, unmaps, bytes (dict)
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


class BackendCalls(ctypes.Structure):
    """`hipmemBackendCalls`: what a hipmem pool has asked of the backend."""
    _fields_ = [(n, ctypes.c_uint64) for n in (
        "segments_allocated", "segments_freed", "granules_created", "granules_released",
        "maps", "unmaps", "bytes_created", "bytes_released", "bytes_lent", "released_on_worker")]


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

    def backend_calls(self, device):
        """What `device`'s current pool has asked of the driver since it was
        made (`hipmemPoolGetBackendCalls`), as a dict of the ten counts, with
        "calls" the calls among them (the byte counts are not calls). Each
        such call costs microseconds on a GPU: a step whose time moves with
        them is paying for memory the pool gave back and made again."""
        c = BackendCalls()
        self._check("hipmemPoolGetBackendCalls",
                    self.hip.hipmemPoolGetBackendCalls(self._pool(device), ctypes.byref(c)))
        d = {name: getattr(c, name) for name, _ in BackendCalls._fields_}
        d["calls"] = sum(d[n] for n in ("segments_allocated", "segments_freed", "granules_created",
                                        "granules_released", "maps", "unmaps"))
        return d

    def host_waits(self, device):
        """How many times `device`'s current pool has blocked the calling
        thread on a stream of its own accord (`hipmemPoolGetHostWaits`): a
        growth that could set a new peak waiting for that stream's frees.
        The GPU idles after each until work is queued again."""
        n = ctypes.c_uint64()
        self._check("hipmemPoolGetHostWaits",
                    self.hip.hipmemPoolGetHostWaits(self._pool(device), ctypes.byref(n)))
        return n.value

    def set_planning(self, device, on):
        """Turns learned layouts of `device`'s current pool on or off
        (`hipmemPoolSetPlanning`)."""
        self._check("hipmemPoolSetPlanning",
                    self.hip.hipmemPoolSetPlanning(self._pool(device), 1 if on else 0))


DIRECT = r"""
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <sys/types.h>
#include <cstdio>
#include <exception>
#include <memory>

namespace {
using Base = torch::cuda::CUDAPluggableAllocator::CUDAPluggableAllocator;
typedef void* (*alloc_fn)(ssize_t, int, cudaStream_t);
typedef void (*free_fn)(void*, size_t, int, cudaStream_t);
alloc_fn g_alloc;              // hipmem_torch_alloc
c10::DeleterFnPtr g_delete;    // hipmem_torch_delete

c10::DeviceIndex current_device() {
  c10::DeviceIndex device = -1;
  C10_CUDA_CHECK(c10::cuda::GetDevice(&device));
  return device;
}

// PyTorch's pluggable allocator, with every allocation going straight to
// hipmem: a tensor's DataPtr holds only its data pointer (context == data,
// as Allocator::raw_allocate requires), which hipmem_torch_delete frees in
// the order of the stream it was allocated on. The pluggable allocator's
// own path keeps a locked map of every live block for that.
struct Direct final : Base {
  Direct(alloc_fn a, free_fn f) : Base(a, f) {}
  c10::DataPtr allocate(size_t size) override {
    c10::DeviceIndex device = current_device();
    void* r = g_alloc((ssize_t)size, device, c10::cuda::getCurrentCUDAStream(device));
    return {r, r, g_delete, c10::Device(c10::DeviceType::CUDA, device)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return g_delete; }
  void* raw_alloc(size_t size) override {
    c10::DeviceIndex device = current_device();
    return g_alloc((ssize_t)size, device, c10::cuda::getCurrentCUDAStream(device));
  }
  void* raw_alloc_with_stream(size_t size, cudaStream_t stream) override {
    return g_alloc((ssize_t)size, current_device(), stream);
  }
  void raw_delete(void* ptr) override { g_delete(ptr); }
};
}  // namespace

extern "C" int hipmem_direct_install(void* alloc, void* del, void* free, void* record, void* reset,
                                     void* fraction, char* why, size_t why_len) {
  // (PyTorch refuses to swap an allocator it has used already: the reason
  // goes back to Python, never as an exception through ctypes.)
  try {
    g_alloc = (alloc_fn)alloc;
    g_delete = (c10::DeleterFnPtr)del;
    auto a = std::make_shared<Direct>(g_alloc, (free_fn)free);
    if (record) a->set_record_stream_fn((void (*)(void*, cudaStream_t))record);
    if (reset) a->set_reset_fn((void (*)())reset);
    if (fraction) a->set_memory_fraction_fn((void (*)(double, int))fraction);
    a->init(0);
    torch::cuda::CUDAPluggableAllocator::changeCurrentAllocator(a);
    return 0;
  } catch (const std::exception& e) {
    snprintf(why, why_len, "%s", e.what());
  } catch (...) {
    snprintf(why, why_len, "an unknown C++ exception");
  }
  return -1;
}
"""


def build_cpp(source, name, flags=(), tag=""):
    """Compiles C++ `source` with g++ (and `flags`) into a shared library and
    loads it (ctypes). Built once per source and `tag`, kept in the temporary
    directory (`hipmem-torch-NAME`). A failed build raises RuntimeError with
    the compiler's message."""
    import hashlib
    import subprocess
    import tempfile
    d = os.path.join(tempfile.gettempdir(), f"hipmem-torch-{name}")
    os.makedirs(d, exist_ok=True)
    digest = hashlib.sha1((source + tag).encode()).hexdigest()[:12]
    so = os.path.join(d, f"{name}-{digest}.so")
    if not os.path.exists(so):
        # (Per-process names, then an atomic rename: processes building at
        # once do not meet.)
        src, tmp = os.path.join(d, f"{name}-{os.getpid()}.cpp"), so + f".{os.getpid()}"
        with open(src, "w") as f:
            f.write(source)
        cmd = ["g++", "-O2", "-std=c++17", "-shared", "-fPIC", src, "-o", tmp, *flags]
        p = subprocess.run(cmd, capture_output=True, text=True)
        os.remove(src)
        if p.returncode != 0:
            raise RuntimeError(f"hipmem_torch: building {name} with g++ failed:\n" + p.stderr[-4000:])
        os.replace(tmp, so)
    return ctypes.CDLL(so)


def build_against_torch(torch, source, name, libs):
    """[`build_cpp`] against the installed PyTorch and CUDA, once per source
    and PyTorch version; `libs` are the PyTorch libraries it links (e.g.
    ["c10", "c10_cuda"])."""
    from torch.utils.cpp_extension import CUDA_HOME, include_paths, library_paths
    abi = int(torch.compiled_with_cxx11_abi())
    flags = [f"-D_GLIBCXX_USE_CXX11_ABI={abi}", f"-I{CUDA_HOME}/include"]
    flags += [f"-I{p}" for p in include_paths()]
    for p in library_paths():
        flags += [f"-L{p}", f"-Wl,-rpath,{p}"]
    flags += [f"-l{lib}" for lib in libs] + [f"-L{CUDA_HOME}/lib64", "-lcudart"]
    return build_cpp(source, name, flags, tag=torch.__version__)


def use_hipmem(lib, record_stream=True, direct=False):
    """Makes libhipmem PyTorch's CUDA allocator (call before PyTorch's first
    CUDA allocation; HIPMEM_BACKEND defaults to cuda); returns its Pool.

    PyTorch hands `tensor.record_stream(s)` to a pluggable allocator only
    through a function registered with `set_record_stream_fn`; without it the
    call is silently dropped, and memory still read on another stream can be
    reused by the stream that allocated it. `record_stream=False` leaves it
    unregistered (for comparison only).

    `direct=True` installs a small C++ subclass of PyTorch's pluggable
    allocator (compiled with g++ against the installed PyTorch on first use)
    whose allocations go straight to hipmem (`hipmem_torch_alloc`) and whose
    tensors carry only their data pointer to the deleter
    (`hipmem_torch_delete` frees by address, on the allocation's stream):
    the pluggable allocator's own path locks a map of every live block on
    each allocation and free. The same pool, statistics and record_stream,
    empty_cache and memory-fraction functions."""
    import torch

    lib = os.path.abspath(lib)
    os.environ.setdefault("HIPMEM_BACKEND", "cuda")
    dll = ctypes.CDLL(lib)

    def address(name):
        return ctypes.cast(getattr(dll, name), ctypes.c_void_p).value

    if direct:
        # (use_hipmem(lib) without direct=True needs no compiler.)
        h = build_against_torch(torch, DIRECT, "direct", ["torch_cuda", "torch", "c10_cuda", "c10"])
        h.hipmem_direct_install.argtypes = [ctypes.c_void_p] * 6 + [ctypes.c_char_p, ctypes.c_size_t]
        why = ctypes.create_string_buffer(4096)
        rc = h.hipmem_direct_install(address("hipmem_torch_alloc"), address("hipmem_torch_delete"),
                                     address("hipmem_torch_free"),
                                     address("hipmem_torch_record_stream") if record_stream else None,
                                     address("hipmem_torch_reset"), address("hipmem_torch_set_memory_fraction"),
                                     why, len(why))
        if rc != 0:
            raise RuntimeError("hipmem_torch: PyTorch refused the direct allocator: "
                               + why.value.decode(errors="replace").strip())
        return Pool(lib)
    alloc = torch.cuda.memory.CUDAPluggableAllocator(lib, "hipmem_torch_malloc", "hipmem_torch_free")
    native = alloc.allocator()

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
