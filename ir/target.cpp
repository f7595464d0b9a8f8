#include "ir/target.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <string>
#include <thread>

#include "ir/error.h"

namespace fuse::ir {

// Reads a cache size such as "48K" or "2048K" from sysfs; 0 when absent.
static int64_t sysfs_cache_bytes(int index) {
  std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/size");
  std::string text;
  if (!(f >> text) || text.empty()) return 0;
  int64_t value = 0;
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) value = value * 10 + (text[i++] - '0');
  if (i < text.size() && (text[i] == 'K' || text[i] == 'k')) value <<= 10;
  if (i < text.size() && (text[i] == 'M' || text[i] == 'm')) value <<= 20;
  return value;
}

Target Target::host() {
  Target t;
#if defined(__x86_64__)
  __builtin_cpu_init();
  t.vector_bits = __builtin_cpu_supports("avx512f") ? 512 : __builtin_cpu_supports("avx2") ? 256 : 128;
#else
  t.vector_bits = 128;
#endif
  t.cores = std::max(1u, std::thread::hardware_concurrency());
  // index0/1 are L1 data/instruction, index2 L2, index3 L3 on Linux x86.
  if (int64_t l1 = sysfs_cache_bytes(0)) t.l1_bytes = l1;
  if (int64_t l2 = sysfs_cache_bytes(2)) t.l2_bytes = l2;
  if (int64_t l3 = sysfs_cache_bytes(3)) t.l3_bytes = l3;
  return t;
}

// "48K", "2M", "1G" or plain bytes; 0 when the text is not such a size.
static int64_t parse_size(std::string_view text) {
  int64_t value = 0;
  size_t i = 0;
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
    if (value > (int64_t{1} << 40)) return 0;
    value = value * 10 + (text[i] - '0');
  }
  if (i == 0) return 0;
  std::string_view suffix = text.substr(i);
  if (suffix.empty()) return value;
  if (suffix == "K" || suffix == "k") return value << 10;
  if (suffix == "M" || suffix == "m") return value << 20;
  if (suffix == "G" || suffix == "g") return value << 30;
  return 0;
}

Target Target::cpu(std::string_view description) {
  Target t = host();
  while (!description.empty()) {
    size_t comma = description.find(',');
    std::string_view part = description.substr(0, comma);
    description = comma == std::string_view::npos ? std::string_view() : description.substr(comma + 1);
    size_t eq = part.find('=');
    std::string_view key = part.substr(0, eq);
    int64_t value = eq == std::string_view::npos ? -1 : parse_size(part.substr(eq + 1));
    auto bad = [&](const std::string& why) {
      return Error("CPU description: '" + std::string(part) + "' " + why +
                       " (expected avx512, avx2, vector=BITS, l1=SIZE, l2=SIZE, l3=SIZE, stream=SIZE, stream_results=SIZE or cores=N)");
    };
    if (part == "avx512") t.vector_bits = 512;
    else if (part == "avx2") t.vector_bits = 256;
    else if (eq == std::string_view::npos) throw bad("is not a property");
    else if (value <= 0) throw bad("needs a positive size such as 48K");
    else if (key == "vector") {
      if (value != 128 && value != 256 && value != 512) throw bad("must be 128, 256 or 512");
      t.vector_bits = static_cast<int>(value);
    } else if (key == "l1") t.l1_bytes = value;
    else if (key == "l2") t.l2_bytes = value;
    else if (key == "l3") t.l3_bytes = value;
    else if (key == "stream") t.streaming_bytes = t.result_streaming_bytes = value;
    else if (key == "stream_results") t.result_streaming_bytes = value;
    else if (key == "cores") t.cores = static_cast<int>(std::min<int64_t>(value, 1024));
    else throw bad("is not a property");
  }
  return t;
}

Target Target::cuda(int device, int sm) {
  Target t;
  t.kind = TargetKind::Cuda;
  t.device = device;
  t.sm = sm;
  return t;
}

Target Target::cuda_sim() {
  Target t = cuda();
  t.simulated = true;
  return t;
}

}  // namespace fuse::ir
