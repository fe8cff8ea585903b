// The rmm role's compile check: RMM's headers, its CMake target and librmm.so
// together. Prints the headers' version, calls into librmm.so (no GPU needed)
// and, where a GPU is visible, allocates device memory through RMM.
#include <rmm/cuda_stream_view.hpp>
#include <rmm/device_buffer.hpp>
#include <rmm/logger.hpp>
#include <rmm/version_config.hpp>

#include <cuda_runtime_api.h>

#include <cstdio>

int main()
{
  std::printf("rmm %s\n", RMM_VERSION);
  rapids_logger::logger& logger = rmm::default_logger();
  std::printf("logger %p\n", static_cast<void*>(&logger));

  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("gpu none\n");
    return 0;
  }
  constexpr std::size_t size = 1 << 20;
  cuda::stream_ref const stream{cudaStream_t{nullptr}};
  rmm::device_buffer buffer(size, stream);
  stream.sync();
  std::printf("gpu allocated %zu bytes\n", buffer.size());
  return buffer.size() == size ? 0 : 1;
}
