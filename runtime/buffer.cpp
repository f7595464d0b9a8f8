#include "runtime/buffer.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <utility>

#include "ir/error.h"

namespace fuse::runtime {

void* allocate_aligned_host(std::size_t bytes) {
  bool huge = bytes >= Buffer::kHugePageBytes;
  std::size_t align = huge ? Buffer::kHugePageBytes : Buffer::kAlignment;
  std::size_t rounded = (bytes + align - 1) / align * align;  // aligned_alloc wants a multiple
  void* p = rounded >= bytes ? std::aligned_alloc(align, rounded) : nullptr;
  // Only a hint: without transparent huge pages the kernel refuses it and nothing is lost.
  if (p && huge) madvise(p, rounded, MADV_HUGEPAGE);
  return p;
}

namespace {

void* allocate_host(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = allocate_aligned_host(bytes);
  if (!p) throw ir::Error("out of memory: could not allocate " + std::to_string(bytes) + " bytes");
  return p;
}

void require_available(Device device) {
  if (device.kind == DeviceKind::Cuda)
    throw ir::Error("CUDA buffers are not available in this build (asked for " + device.str() + ")");
}

}  // namespace

std::size_t checked_size_bytes(ir::DType dtype, const ir::ConcreteShape& shape) {
  std::size_t bytes = ir::dtype_size(dtype);
  for (int64_t d : shape) {
    if (d < 0) throw ir::Error("a buffer's shape has a negative dim: " + ir::shape_str(shape));
    if (__builtin_mul_overflow(bytes, static_cast<std::size_t>(d), &bytes))
      throw ir::Error("a buffer of shape " + ir::shape_str(shape) + " has too many bytes to address");
  }
  return bytes;
}

std::string Device::str() const {
  switch (kind) {
    case DeviceKind::Cpu: return "cpu";
    case DeviceKind::Cuda: return "cuda:" + std::to_string(index);
  }
  return "unknown";
}

Buffer::~Buffer() { release(); }

Buffer::Buffer(Buffer&& other) noexcept
    : dtype_(other.dtype_),
      shape_(std::exchange(other.shape_, {0})),
      device_(other.device_),
      data_(std::exchange(other.data_, nullptr)),
      size_bytes_(std::exchange(other.size_bytes_, 0)) {
  other.dtype_ = ir::DType::F32;
  other.device_ = Device::cpu();
}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    release();
    dtype_ = std::exchange(other.dtype_, ir::DType::F32);
    shape_ = std::exchange(other.shape_, {0});
    device_ = std::exchange(other.device_, Device::cpu());
    data_ = std::exchange(other.data_, nullptr);
    size_bytes_ = std::exchange(other.size_bytes_, 0);
  }
  return *this;
}

void Buffer::release() {
  std::free(data_);
  data_ = nullptr;
  size_bytes_ = 0;
}

Buffer Buffer::empty(ir::DType dtype, ir::ConcreteShape shape, Device device) {
  require_available(device);
  Buffer b;
  b.size_bytes_ = checked_size_bytes(dtype, shape);
  b.data_ = allocate_host(b.size_bytes_);
  b.dtype_ = dtype;
  b.shape_ = std::move(shape);
  b.device_ = device;
  return b;
}

Buffer Buffer::from_host(const ir::HostArray& array, Device device) {
  Buffer b = empty(array.dtype, array.shape, device);
  if (array.bytes.size() != b.size_bytes_)
    throw ir::Error("a host array of shape " + ir::shape_str(array.shape) + " holds " +
                    std::to_string(array.bytes.size()) + " bytes instead of " +
                    std::to_string(b.size_bytes_));
  if (b.size_bytes_ > 0) std::memcpy(b.data_, array.data(), b.size_bytes_);
  return b;
}

ir::HostArray Buffer::to_host() const {
  ir::HostArray a(dtype_, shape_);
  if (size_bytes_ > 0) std::memcpy(a.data(), data_, size_bytes_);
  return a;
}

}  // namespace fuse::runtime
