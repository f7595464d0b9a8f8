#include "ir/cuda_plan.h"

#include <sstream>

namespace fuse::ir {

static const char* arg_kind_name(CudaArg::Kind k) {
  switch (k) {
    case CudaArg::Kind::Buffer: return "buffer";
    case CudaArg::Kind::Constant: return "constant";
    case CudaArg::Kind::Scratch: return "scratch";
    case CudaArg::Kind::Symbol: return "symbol";
  }
  return "?";
}

std::string print_cuda_plan(const CudaPlan& plan) {
  std::ostringstream os;
  os << "cuda plan for " << plan.sm << "\n";
  if (!plan.symbols.empty()) {
    os << "  symbols:";
    for (const std::string& s : plan.symbols) os << " " << s;
    os << "\n";
  }
  for (size_t i = 0; i < plan.constants.size(); ++i)
    os << "  constant " << i << ": " << dtype_name(plan.constants[i].dtype) << shape_str(plan.constants[i].shape) << "\n";
  for (size_t i = 0; i < plan.scratch_bytes.size(); ++i)
    os << "  scratch " << i << ": " << plan.scratch_bytes[i] << " bytes\n";
  for (const CudaLaunch& l : plan.launches) {
    os << "  launch " << l.entry << " (kernel " << l.kernel << ") block [" << l.block[0] << ", " << l.block[1]
       << ", " << l.block[2] << "] grid [";
    for (int i = 0; i < 3; ++i) {
      os << (i ? ", " : "") << "ceil(" << l.work[i].str() << "/" << l.work_per_block[i] << ")";
      if (l.max_grid[i] < (i == 0 ? 2147483647 : 65535)) os << " max " << l.max_grid[i];
    }
    os << "]";
    if (l.shared_bytes) os << " shared " << l.shared_bytes;
    os << " args (";
    for (size_t a = 0; a < l.args.size(); ++a)
      os << (a ? ", " : "") << arg_kind_name(l.args[a].kind) << " " << l.args[a].index;
    os << ")\n";
  }
  return os.str();
}

}  // namespace fuse::ir
