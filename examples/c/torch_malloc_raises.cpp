// hipmem's PyTorch allocator entry point, called as PyTorch calls it: through
// a std::function that returns whatever it gets (PyTorch's pluggable
// allocator makes a tensor of a null). A failure must arrive as a C++
// exception, which PyTorch raises in Python, with hipmem's reason in it;
// with raising turned off, as null with the HIP error recorded.
//
//   g++ -I include examples/c/torch_malloc_raises.cpp -L target/release -lhipmem -o torch_malloc_raises
#include <hip/hip_runtime.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <sys/types.h>

// The PyTorch entry points (loaded by name by PyTorch; not in hip_runtime.h).
extern "C" void* hipmem_torch_malloc(ssize_t size, int device, hipStream_t stream);
extern "C" void hipmem_torch_free(void* ptr, size_t size, int device, hipStream_t stream);
extern "C" hipError_t hipmem_torch_raise_on_failure(int on);

static int failures = 0;

static void check(bool ok, const char* what) {
    std::printf("%s: %s\n", ok ? "ok" : "FAILED", what);
    if (!ok) failures++;
}

// What PyTorch holds: a std::function over the C function (size_t, as PyTorch passes it).
static std::function<void*(size_t, int, hipStream_t)> alloc_fn =
    [](size_t size, int device, hipStream_t stream) {
        return hipmem_torch_malloc(static_cast<ssize_t>(size), device, stream);
    };

// Calls alloc_fn; returns the exception's text, or null if none was thrown.
static const char* raised(size_t size, int device, void** out) {
    static char text[1024];
    *out = nullptr;
    try {
        *out = alloc_fn(size, device, nullptr);
    } catch (const std::runtime_error& e) {
        std::snprintf(text, sizeof text, "%s", e.what());
        return text;
    } catch (...) {
        std::snprintf(text, sizeof text, "(an exception that is not a std::runtime_error)");
        return text;
    }
    return nullptr;
}

int main() {
    check(hipmem_torch_raise_on_failure(1) == hipSuccess, "raising is available in a C++ program");

    void* p = nullptr;
    const char* e = raised(1 << 20, 0, &p);
    check(e == nullptr && p != nullptr, "a good allocation returns memory and raises nothing");
    hipmem_torch_free(p, 1 << 20, 0, nullptr);

    e = raised(size_t(1) << 60, 0, &p);
    check(e != nullptr && std::strstr(e, "out of memory") && std::strstr(e, "hipErrorOutOfMemory"),
          "memory that cannot be had raises an out-of-memory std::runtime_error");
    if (e) std::printf("  %s\n", e);
    check(p == nullptr, "no pointer came back");

    e = raised(size_t(-1), 0, &p);  // -1 as PyTorch's ssize_t
    check(e != nullptr && std::strstr(e, "negative size") && std::strstr(e, "hipErrorInvalidValue"),
          "a negative size raises, naming it");

    e = raised(64, 99, &p);
    check(e != nullptr && std::strstr(e, "hipErrorInvalidDevice"), "an unknown device raises, naming it");

    // The exception left nothing behind: allocation works on.
    e = raised(4096, 0, &p);
    check(e == nullptr && p != nullptr, "allocation works after the exceptions");
    hipmem_torch_free(p, 4096, 0, nullptr);

    // Turned off: null, and the error recorded.
    check(hipmem_torch_raise_on_failure(0) == hipSuccess, "raising turned off");
    (void)hipGetLastError();
    e = raised(size_t(1) << 60, 0, &p);
    check(e == nullptr && p == nullptr, "with raising off, a failure is null");
    check(hipGetLastError() == hipErrorOutOfMemory, "and hipGetLastError says why");
    check(hipmem_torch_raise_on_failure(2) == hipErrorInvalidValue, "a setting that is not 0 or 1");
    check(hipmem_torch_raise_on_failure(1) == hipSuccess, "raising on again");

    std::printf("%s\n", failures ? "FAILED" : "all checks passed");
    return failures ? 1 : 0;
}
