// Devices and the memory that kernels read and write on them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "ir/dtype.h"
#include "ir/host_array.h"
#include "ir/shape.h"

namespace fuse::runtime {

/// Bytes of a dense `shape` of `dtype`. Throws ir::Error for a negative dim or a size past
/// what size_t holds (host and device buffers alike).
std::size_t checked_size_bytes(ir::DType dtype, const ir::ConcreteShape& shape);

enum class DeviceKind { Cpu, Cuda };

/// Where a Buffer lives: the host ("cpu") or one GPU ("cuda:N").
struct Device {
  DeviceKind kind = DeviceKind::Cpu;
  int index = 0;  // the GPU's ordinal; 0 for the CPU

  static Device cpu() { return {DeviceKind::Cpu, 0}; }
  static Device cuda(int index) { return {DeviceKind::Cuda, index}; }
  std::string str() const;  // "cpu", "cuda:0"
  bool operator==(const Device&) const = default;
};

/// `bytes` of host memory aligned as Buffer's (below), released with std::free; null when out
/// of memory. Buffer and the compiled kernels' scratch (runtime/cpu_scratch.h) allocate with it.
void* allocate_aligned_host(std::size_t bytes);

/// A dense row-major tensor that owns its memory on one device. Move-only: copies between
/// devices and the host are explicit (from_host, to_host).
///
/// CPU memory is aligned to kAlignment bytes, so kernels may use aligned vector loads; an
/// allocation of at least kHugePageBytes is aligned to kHugePageBytes and advised for
/// transparent huge pages, which saves TLB misses when a kernel streams through it. Zero-size
/// buffers are valid and hold no memory (data() is null).
///
/// Host memory only: asking for a CUDA device throws ir::Error. GPU memory is a DeviceBuffer
/// (runtime/device_buffer.h).
///
/// Thread safety: like a std::vector: concurrent reads are safe, a write needs the only access.
class Buffer {
 public:
  static constexpr std::size_t kAlignment = 64;
  static constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

  /// An f32 buffer of shape [0] on the CPU (what a moved-from Buffer becomes).
  Buffer() = default;
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  /// Uninitialized memory for `shape` on `device`. Throws ir::Error for a negative dim, a size
  /// that overflows, a failed allocation or an unavailable device.
  static Buffer empty(ir::DType dtype, ir::ConcreteShape shape, Device device = Device::cpu());
  /// A copy of `array` on `device`.
  static Buffer from_host(const ir::HostArray& array, Device device = Device::cpu());
  /// A copy of the contents in host memory.
  ir::HostArray to_host() const;

  ir::DType dtype() const { return dtype_; }
  const ir::ConcreteShape& shape() const { return shape_; }
  Device device() const { return device_; }
  void* data() { return data_; }
  const void* data() const { return data_; }
  int64_t num_elements() const { return ir::num_elements(shape_); }
  std::size_t size_bytes() const { return size_bytes_; }

 private:
  void release();

  ir::DType dtype_ = ir::DType::F32;
  ir::ConcreteShape shape_{0};
  Device device_ = Device::cpu();
  void* data_ = nullptr;
  std::size_t size_bytes_ = 0;
};

}  // namespace fuse::runtime
