// Seed 004, "Interprocess memory handling": the listing as the seed prints it.
#include <iostream>
#include <fstream>
#include <hip/hip_runtime.h>

int main() {
    // Considering that you have exported the memory pool pointer already.
    // Now, let's simulate reading the exported data from a named pipe (FIFO).
    const char* fifoPath = "/tmp/myfifo"; // Change this to a unique path.
    std::ifstream fifoStream(fifoPath, std::ios::in | std::ios::binary);

    if (!fifoStream.is_open()) {
        std::cerr << "Error opening FIFO file: " << fifoPath << std::endl;
        return 1;
    }

    // Read the exported data.
    hipMemPoolPtrExportData importData;
    fifoStream.read(reinterpret_cast<char*>(&importData), sizeof(hipMemPoolPtrExportData));
    fifoStream.close();

    if (fifoStream.fail()) {
        std::cerr << "Error reading from FIFO file." << std::endl;
        return 1;
    }

    // Create a memory pool with default properties.
    hipMemPoolProps poolProps = {};
    poolProps.allocType = hipMemAllocationTypePinned;
    poolProps.handleTypes = hipMemHandleTypePosixFileDescriptor;
    poolProps.location.type = hipMemLocationTypeDevice;
    poolProps.location.id = 0; // Assuming device 0.

    hipMemPool_t memPool;
    hipMemPoolCreate(&memPool, &poolProps);

    // Import the memory pool pointer.
    void* importedDevPtr;
    hipError_t result = hipMemPoolImportPointer(&importedDevPtr, memPool, &importData);
    if (result != hipSuccess) {
        std::cerr << "Error imported memory pool pointer: " << hipGetErrorString(result) << std::endl;
        return 1;
    }

    // Now you can use the importedDevPtr for your computations.

    // Clean up (free the memory).
    hipFree(importedDevPtr);

    return 0;
}
