// AOT bundles: a CUDA program saved as a directory that the runtime loads without the compiler
// (no MLIR or LLVM): what `fusec --target=cuda --emit=bundle` writes and `fuse-run` runs.
//
//   DIR/kernels.ptx       the PTX text
//   DIR/plan.json         format name and version, the buffers and interface, the launch plan
//   DIR/constant_I.npy    plan constant I
//
// The format is described, with an example plan.json, in docs/architecture.md.
//
// Thread safety: reading and writing bundles keep their state per call; two writers of the same
// directory at once are not supported.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "runtime/cuda_executable.h"

namespace fuse::runtime {

/// The version plan.json carries; readers refuse other versions.
inline constexpr int kBundleFormatVersion = 1;

/// Writes `p` into `dir` (created if needed; files of an earlier bundle there are replaced).
/// Checks `p` first (validate). Throws ir::Error when a file cannot be written.
void write_bundle(const std::string& dir, const CudaProgram& p);

/// Reads a bundle. Throws ir::Error naming the file and the problem for a missing directory or
/// file, malformed JSON, another format version, a field of the wrong type, an unknown dtype,
/// role or argument kind, an unparsable dim, a bad constant file, or an inconsistent plan.
CudaProgram read_bundle(const std::string& dir);

/// One file of a bundle by name ("plan.json", "kernels.ptx", "constant_0.npy"): its bytes, or
/// nullopt when the bundle has no such file.
using BundleFiles = std::function<std::optional<std::string>(const std::string& name)>;

/// What read_bundle does once it has found the directory, on files from anywhere (a directory,
/// memory): the same checks and errors, with `dir` naming the bundle in messages.
CudaProgram parse_bundle(const BundleFiles& files, const std::string& dir);

/// plan.json's contents for `p` (the bundle without the PTX and constants' data).
std::string bundle_plan_json(const CudaProgram& p);

}  // namespace fuse::runtime
