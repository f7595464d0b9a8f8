// GPU memory: a caching allocator per device, and DeviceBuffer, a tensor that lives on a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "ir/host_array.h"
#include "runtime/cuda_driver.h"

namespace fuse::runtime {

/// Keeps freed device blocks for reuse: cuMemAlloc and cuMemFree are slow and synchronize the
/// device, while a run that allocates the same sizes every time (outputs, intermediates) should
/// cost nothing. Blocks are grouped by size class and a request takes a cached block of its class
/// first. When the driver is out of memory the cache is emptied and the allocation tried again.
///
/// Blocks are not tracked per stream: a buffer must not be released while work queued on it is
/// still running on another stream (synchronize first). Thread-safe.
class DeviceAllocator {
 public:
  struct Stats {
    int64_t driver_allocations = 0;  // cuMemAlloc calls that succeeded
    int64_t driver_frees = 0;        // cuMemFree calls (emptying the cache)
    int64_t reuses = 0;              // requests served from the cache
    int64_t bytes_in_use = 0;        // by live blocks (size classes, not requested bytes)
    int64_t bytes_cached = 0;        // in freed blocks kept for reuse
  };

  /// The allocator of device `ordinal`, alive for the whole process.
  static DeviceAllocator& of(int ordinal);

  /// A block of at least `bytes` (0 for 0 bytes). Throws ir::Error naming the driver's error.
  cuda::CUdeviceptr allocate(std::size_t bytes);
  /// Gives back a block `allocate(bytes)` returned, to the cache.
  void release(cuda::CUdeviceptr ptr, std::size_t bytes);
  /// Frees every cached block with the driver.
  void empty_cache();
  Stats stats() const;
  int ordinal() const { return ordinal_; }

  /// The size a request of `bytes` really gets: powers of two from 512 bytes up to 1 MiB, then
  /// whole MiB (so a class wastes at most half a block when small and 1 MiB when large).
  static std::size_t size_class(std::size_t bytes);

 private:
  explicit DeviceAllocator(int ordinal) : ordinal_(ordinal) {}
  void empty_cache_locked();

  int ordinal_;
  mutable std::mutex mutex_;
  std::map<std::size_t, std::vector<cuda::CUdeviceptr>> free_;  // size class -> cached blocks
  Stats stats_;
};

/// A dense row-major tensor in the memory of one GPU. Move-only; transfers are explicit
/// (to_device, to_host, copy_to). Memory comes from the device's DeviceAllocator.
///
/// Transfers use the legacy default stream, which is ordered after the work already queued on
/// every executable's stream: to_host() sees the results of earlier runs. to_device and to_host
/// return once the copy is done; copy_to is asynchronous.
///
/// Thread safety: one DeviceBuffer object is used by one thread at a time (moving or resetting
/// it while another thread reads it is a race); different DeviceBuffers, on any threads, share
/// only the allocator, which is thread-safe.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;  // empty: f32[0] on cuda:0, holding no memory
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  /// Uninitialized device memory for `shape`. Throws ir::Error for a negative dim, cuda::Unavailable
  /// without CUDA, ir::Error with the driver's error name when allocation fails.
  static DeviceBuffer empty(ir::DType dtype, ir::ConcreteShape shape, int device = 0);
  /// A copy of `array` on the device.
  static DeviceBuffer to_device(const ir::HostArray& array, int device = 0);
  /// A copy of the contents in host memory (waits for queued work).
  ir::HostArray to_host() const;
  /// Copies the contents into `dst`, which must have the same dtype and shape (any device).
  void copy_to(DeviceBuffer& dst) const;

  ir::DType dtype() const { return dtype_; }
  const ir::ConcreteShape& shape() const { return shape_; }
  int device() const { return device_; }
  cuda::CUdeviceptr data() const { return data_; }
  int64_t num_elements() const { return ir::num_elements(shape_); }
  std::size_t size_bytes() const { return size_bytes_; }
  std::string str() const;  // "f32[3, 4] on cuda:0"

 private:
  void release();

  ir::DType dtype_ = ir::DType::F32;
  ir::ConcreteShape shape_{0};
  int device_ = 0;
  cuda::CUdeviceptr data_ = 0;
  std::size_t size_bytes_ = 0;
};

using DeviceTensorMap = std::map<std::string, DeviceBuffer>;

}  // namespace fuse::runtime
