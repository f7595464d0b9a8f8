// libFuzzer target for the .npy reader (runtime::parse_npy, which read_npy, fuse-run and fusec use):
// any bytes must give an array or an ir::Error, never a crash, undefined behaviour or an
// allocation larger than the data present. An array it gives must survive a write/read round
// trip and print with array_repr.
// Built and run by tests/fuzz/run_fuzz.sh npy (not part of the CMake build).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "ir/error.h"
#include "runtime/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  fuse::ir::HostArray a;
  try {
    a = fuse::runtime::parse_npy(bytes, "fuzz.npy");
  } catch (const fuse::ir::Error&) {
    return 0;
  }
  // Data is copied, never invented: the array holds no more bytes than the input.
  if (a.bytes.size() > size) __builtin_trap();
  fuse::ir::HostArray b = fuse::runtime::parse_npy(fuse::runtime::serialize_npy(a), "round trip");
  if (b.dtype != a.dtype || b.shape != a.shape || b.bytes != a.bytes) __builtin_trap();
  fuse::runtime::array_repr(a, "a = ");
  return 0;
}
