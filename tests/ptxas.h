// Assembling PTX with the toolkit's ptxas, for the tests that emit PTX without a GPU.
#pragma once

#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace fuse::testing {

// ptxas from $CUDA_HOME, $CUDA_PATH or /usr/local/cuda; empty when there is none.
inline std::string find_ptxas() {
  namespace fs = std::filesystem;
  std::vector<std::string> roots;
  for (const char* name : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* v = std::getenv(name); v && *v) roots.push_back(v);
  roots.push_back("/usr/local/cuda");
  for (const std::string& root : roots)
    if (fs::exists(fs::path(root) / "bin" / "ptxas")) return (fs::path(root) / "bin" / "ptxas").string();
  return "";
}

// Assembles `ptx` for `arch`; the empty string when ptxas accepts it, else its messages.
inline std::string ptxas_errors(const std::string& ptx, const std::string& arch) {
  namespace fs = std::filesystem;
  static const std::string ptxas = find_ptxas();
  if (ptxas.empty()) {
    WARN("ptxas not found (set CUDA_HOME): PTX not assembled");
    return "";
  }
  fs::path dir = fs::path(FUSE_BINARY_DIR) / "tests" / "cuda_scratch";
  fs::create_directories(dir);
  std::string tag = std::to_string(getpid());
  fs::path file = dir / ("kernels." + tag + ".ptx"), log = dir / ("ptxas." + tag + ".log");
  std::ofstream(file) << ptx;
  std::string command = ptxas + " -arch=" + arch + " " + file.string() + " -o /dev/null > " + log.string() + " 2>&1";
  if (std::system(command.c_str()) == 0) return "";
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  return "ptxas failed:\n" + text.str();
}

}  // namespace fuse::testing
