#include "runtime/device_buffer.h"

#include <memory>
#include <utility>

#include "ir/error.h"
#include "runtime/buffer.h"

namespace fuse::runtime {

using cuda::check;
using cuda::CUdeviceptr;

// ---- DeviceAllocator ----

DeviceAllocator& DeviceAllocator::of(int ordinal) {
  static std::mutex mutex;
  // Never destroyed: buffers in static objects may be released after main returns.
  static auto* allocators = new std::map<int, std::unique_ptr<DeviceAllocator>>;
  cuda::api(ordinal);  // throws for an unavailable driver or a bad ordinal
  std::lock_guard lock(mutex);
  std::unique_ptr<DeviceAllocator>& a = (*allocators)[ordinal];
  if (!a) a.reset(new DeviceAllocator(ordinal));
  return *a;
}

std::size_t DeviceAllocator::size_class(std::size_t bytes) {
  constexpr std::size_t kMin = 512, kMiB = std::size_t{1} << 20;
  if (bytes <= kMin) return kMin;
  if (bytes <= kMiB) return std::size_t{1} << (64 - __builtin_clzll(bytes - 1));
  if (bytes > SIZE_MAX - kMiB) return bytes;  // the driver refuses it anyway
  return (bytes + kMiB - 1) / kMiB * kMiB;
}

CUdeviceptr DeviceAllocator::allocate(std::size_t bytes) {
  if (bytes == 0) return 0;
  std::size_t size = size_class(bytes);
  std::lock_guard lock(mutex_);
  auto it = free_.find(size);
  if (it != free_.end() && !it->second.empty()) {
    CUdeviceptr p = it->second.back();
    it->second.pop_back();
    ++stats_.reuses;
    stats_.bytes_cached -= static_cast<int64_t>(size);
    stats_.bytes_in_use += static_cast<int64_t>(size);
    return p;
  }
  const cuda::DriverApi& api = cuda::api(ordinal_);
  CUdeviceptr p = 0;
  cuda::CUresult r = api.cuMemAlloc_v2(&p, size);
  if (r != cuda::CUDA_SUCCESS && !free_.empty()) {
    // Cached blocks of other sizes may be what is missing.
    empty_cache_locked();
    r = api.cuMemAlloc_v2(&p, size);
  }
  if (r != cuda::CUDA_SUCCESS)
    throw ir::Error("cuMemAlloc_v2 failed: " + cuda::error_text(api, r) + " allocating " + std::to_string(bytes) +
                    " bytes on cuda:" + std::to_string(ordinal_));
  ++stats_.driver_allocations;
  stats_.bytes_in_use += static_cast<int64_t>(size);
  return p;
}

void DeviceAllocator::release(CUdeviceptr ptr, std::size_t bytes) {
  if (ptr == 0) return;
  std::size_t size = size_class(bytes);
  std::lock_guard lock(mutex_);
  free_[size].push_back(ptr);
  stats_.bytes_in_use -= static_cast<int64_t>(size);
  stats_.bytes_cached += static_cast<int64_t>(size);
}

void DeviceAllocator::empty_cache() {
  std::lock_guard lock(mutex_);
  empty_cache_locked();
}

void DeviceAllocator::empty_cache_locked() {
  const cuda::DriverApi& api = cuda::api(ordinal_);
  for (auto& [size, blocks] : free_) {
    for (CUdeviceptr p : blocks) {
      check(api.cuMemFree_v2(p), "cuMemFree_v2");
      ++stats_.driver_frees;
      stats_.bytes_cached -= static_cast<int64_t>(size);
    }
  }
  free_.clear();
}

DeviceAllocator::Stats DeviceAllocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

// ---- DeviceBuffer ----

DeviceBuffer::~DeviceBuffer() { release(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : dtype_(std::exchange(other.dtype_, ir::DType::F32)),
      shape_(std::exchange(other.shape_, {0})),
      device_(std::exchange(other.device_, 0)),
      data_(std::exchange(other.data_, 0)),
      size_bytes_(std::exchange(other.size_bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    dtype_ = std::exchange(other.dtype_, ir::DType::F32);
    shape_ = std::exchange(other.shape_, {0});
    device_ = std::exchange(other.device_, 0);
    data_ = std::exchange(other.data_, 0);
    size_bytes_ = std::exchange(other.size_bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::release() {
  if (data_) DeviceAllocator::of(device_).release(data_, size_bytes_);
  data_ = 0;
  size_bytes_ = 0;
}

DeviceBuffer DeviceBuffer::empty(ir::DType dtype, ir::ConcreteShape shape, int device) {
  DeviceBuffer b;
  b.size_bytes_ = checked_size_bytes(dtype, shape);
  b.data_ = DeviceAllocator::of(device).allocate(b.size_bytes_);
  b.dtype_ = dtype;
  b.shape_ = std::move(shape);
  b.device_ = device;
  return b;
}

DeviceBuffer DeviceBuffer::to_device(const ir::HostArray& array, int device) {
  DeviceBuffer b = empty(array.dtype, array.shape, device);
  if (array.bytes.size() != b.size_bytes_)
    throw ir::Error("a host array of shape " + ir::shape_str(array.shape) + " holds " +
                    std::to_string(array.bytes.size()) + " bytes, not " + std::to_string(b.size_bytes_));
  if (b.size_bytes_ == 0) return b;
  const cuda::DriverApi& api = cuda::api(device);
  check(api.cuMemcpyHtoDAsync_v2(b.data_, array.data(), b.size_bytes_, nullptr), "cuMemcpyHtoDAsync_v2");
  check(api.cuStreamSynchronize(nullptr), "cuStreamSynchronize");
  return b;
}

ir::HostArray DeviceBuffer::to_host() const {
  ir::HostArray a(dtype_, shape_);
  if (size_bytes_ == 0) return a;
  const cuda::DriverApi& api = cuda::api(device_);
  check(api.cuMemcpyDtoHAsync_v2(a.data(), data_, size_bytes_, nullptr), "cuMemcpyDtoHAsync_v2");
  check(api.cuStreamSynchronize(nullptr), "cuStreamSynchronize");
  return a;
}

void DeviceBuffer::copy_to(DeviceBuffer& dst) const {
  if (dst.dtype_ != dtype_ || dst.shape_ != shape_)
    throw ir::Error("cannot copy " + str() + " into " + dst.str() + ": dtypes and shapes must match");
  if (size_bytes_ == 0 || &dst == this) return;
  const cuda::DriverApi& api = cuda::api(device_);
  check(api.cuMemcpyDtoDAsync_v2(dst.data_, data_, size_bytes_, nullptr), "cuMemcpyDtoDAsync_v2");
}

std::string DeviceBuffer::str() const {
  return std::string(ir::dtype_name(dtype_)) + ir::shape_str(shape_) + " on cuda:" + std::to_string(device_);
}

}  // namespace fuse::runtime
