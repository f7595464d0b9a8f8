// Loads simulated module images (loader.cpp); no LLVM types in this header.
#pragma once

#include <memory>
#include <string>

namespace fuse::runtime::sim {

class LoadedObject {
 public:
  /// Loads a NUL-terminated-header image (ir/cuda_sim_abi.h); null with `error` set on failure.
  static std::unique_ptr<LoadedObject> load(const char* image, std::string& error);
  ~LoadedObject();
  /// A symbol's address, or null with `error` set.
  void* lookup(const std::string& name, std::string& error);

 private:
  LoadedObject();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fuse::runtime::sim
