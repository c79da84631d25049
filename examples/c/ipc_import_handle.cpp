// Seed 004, "Interprocess memory handling": the listing as the seed prints it.
#include <iostream>
#include <fstream>
#include <hip/hip_runtime.h>

int main() {
    // Considering that you have exported the memory pool pointer already.
    // Now, let's simulate reading the exported data from a named pipe (FIFO).
    const char* fifoPath = "/tmp/myfifo"; // Change this to a unique path
    std::ifstream fifoStream(fifoPath, std::ios::in | std::ios::binary);

    if (!fifoStream.is_open()) {
        std::cerr << "Error opening FIFO file: " << fifoPath << std::endl;
        return 1;
    }

    // Read the exported data.
    int descriptor;
    fifoStream.read(reinterpret_cast<char*>(&descriptor), sizeof(int));
    fifoStream.close();

    if (fifoStream.fail()) {
        std::cerr << "Error reading from FIFO file." << std::endl;
        return 1;
    }

    // Import the memory pool.
    hipMemPool_t memPool;
    hipError_t result = hipMemPoolImportFromShareableHandle(&memPool, &descriptor, hipMemHandleTypePosixFileDescriptor, 0);
    if (result != hipSuccess) {
        std::cerr << "Error importing memory pool: " << hipGetErrorString(result) << std::endl;
        return 1;
    }

    // Allocate memory from the imported memory pool.
    void* importedDevPtr;
    hipMallocFromPoolAsync(&importedDevPtr, sizeof(int), memPool, 0);

    // Now you can use the importedDevPtr for your computations.

    // Clean up (free the memory).
    hipFree(importedDevPtr);
    hipMemPoolDestroy(memPool);

    return 0;
}
