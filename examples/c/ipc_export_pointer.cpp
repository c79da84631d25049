// Seed 004, "Interprocess memory handling": the listing as the seed prints it.
#include <iostream>
#include <fstream>
#include <hip/hip_runtime.h>
#include <sys/stat.h>

int main() {
    // Allocate memory.
    void* devPtr;
    hipMalloc(&devPtr, sizeof(int));

    // Export the memory pool pointer.
    hipMemPoolPtrExportData exportData;
    hipError_t result = hipMemPoolExportPointer(&exportData, devPtr);
    if (result != hipSuccess) {
        std::cerr << "Error exporting memory pool pointer: " << hipGetErrorString(result) << std::endl;
        return 1;
    }

    // Create a named pipe (FIFO).
    const char* fifoPath = "/tmp/myfifo"; // Change this to a unique path.
    mkfifo(fifoPath, 0666);

    // Write the exported data to the named pipe.
    std::ofstream fifoStream(fifoPath, std::ios::out | std::ios::binary);
    fifoStream.write(reinterpret_cast<char*>(&exportData), sizeof(hipMemPoolPtrExportData));
    fifoStream.close();

    // Clean up.
    hipFree(devPtr);

    return 0;
}
