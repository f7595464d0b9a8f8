// libFuzzer target for the AOT bundle loader (runtime::parse_bundle, which read_bundle and
// fuse-run use): plan.json, kernels.ptx and constant .npy files, all fuzzed, must give a program
// or an ir::Error, never a crash or undefined behaviour. A program it gives must come back the
// same after write_bundle's serialization.
// Built and run by tests/fuzz/run_fuzz.sh bundle (not part of the CMake build).
//
// An input is plan.json, then each further file as a line "%%file NAME" and its bytes:
//   {"format": "fuse-cuda-bundle", ...}
//   %%file kernels.ptx
//   .version 7.0 ...
//   %%file constant_0.npy
//   \x93NUMPY...
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "ir/error.h"
#include "runtime/bundle.h"
#include "runtime/npy.h"

namespace {

constexpr std::string_view kFileMarker = "\n%%file ";

std::map<std::string, std::string> split_files(std::string_view input) {
  std::map<std::string, std::string> files;
  std::string name = "plan.json";
  while (true) {
    size_t marker = input.find(kFileMarker);
    files.emplace(name, input.substr(0, marker));
    if (marker == std::string_view::npos) return files;
    input.remove_prefix(marker + kFileMarker.size());
    size_t eol = input.find('\n');
    name = input.substr(0, eol);
    input.remove_prefix(eol == std::string_view::npos ? input.size() : eol + 1);
  }
}

fuse::runtime::CudaProgram load(const std::map<std::string, std::string>& files) {
  return fuse::runtime::parse_bundle(
      [&](const std::string& name) -> std::optional<std::string> {
        auto it = files.find(name);
        if (it == files.end()) return std::nullopt;
        return it->second;
      },
      "fuzz");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuse::runtime::CudaProgram p;
  try {
    p = load(split_files(std::string_view(reinterpret_cast<const char*>(data), size)));
  } catch (const fuse::ir::Error&) {
    return 0;
  }
  // What write_bundle would write reads back as the same program.
  std::map<std::string, std::string> written = {{"plan.json", fuse::runtime::bundle_plan_json(p)},
                                                {"kernels.ptx", p.ptx}};
  for (size_t i = 0; i < p.plan.constants.size(); ++i)
    written["constant_" + std::to_string(i) + ".npy"] = fuse::runtime::serialize_npy(p.plan.constants[i]);
  fuse::runtime::CudaProgram q = load(written);
  if (fuse::runtime::bundle_plan_json(q) != written["plan.json"] || q.ptx != p.ptx) __builtin_trap();
  return 0;
}
