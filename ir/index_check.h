// Run-time index checks inside compiled kernels (issue 16): the error record.
//
// A gather or scatter op reads its indices from data, so a compiled kernel can only find a bad
// one while it runs. Each such op of a Program is one check, numbered program-wide (kernels in
// order, their bodies' checked nodes in node order: index_checks()). A kernel that finds a bad
// index writes into the run's error record and must then touch no memory at that index (it
// loads a zero, or skips the write); the executable reads the record after the kernel (CPU) or
// the run (CUDA) and throws the interpreter's error for that check (ir::index_error), before it
// hands over any output.
//
// How a kernel reports an error (codegen: KernelEmitterBase::check_index does all of it):
//   if (index is bad) {
//     if (atomic_cmpxchg(&record[kErrorCheck], 0, check + 1) succeeded)   // the first wins
//       record[kErrorIndex] = index;                                      // as the user wrote it
//   }
// The record is kErrorRecordWords int64 words, zeroed before every run. CPU kernels with checks
// take its address as their last buffer pointer (after the constants and a split reduction's
// scratch); CUDA kernels as a Scratch argument (CudaPlan::error_scratch), last.
//
// Thread safety: plain data and pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/program.h"

namespace fuse::ir {

inline constexpr int kErrorCheck = 0;  // word: 0 no error, else the failed check's number + 1
inline constexpr int kErrorIndex = 1;  // word: the offending index (or bincount value)
inline constexpr int kErrorRecordWords = 2;

/// Whether an op checks data-dependent indices at run time.
bool has_index_check(OpKind k);  // Take, TakeAlongAxis, IndexAdd, Bincount

/// What one check tests and how its failure reads: ir::index_error(op, index, size, axis, loc).
struct IndexCheck {
  OpKind op = OpKind::Take;
  int axis = 0;
  Dim size;       // the checked axis's size (bincount: its length)
  SourceLoc loc;  // the op's source location
  int kernel = -1;
  NodeId node = -1;  // in the kernel's body
  bool operator==(const IndexCheck& o) const {
    return op == o.op && axis == o.axis && size == o.size && loc.str() == o.loc.str() && kernel == o.kernel &&
           node == o.node;
  }
};

/// The checked nodes of a kernel body, in node order.
std::vector<NodeId> checked_nodes(const Graph& body);
/// Every check of the Program, numbered by position: kernels in order, then checked_nodes.
std::vector<IndexCheck> index_checks(const Program& p);
/// The number of the first check of kernel `kernel` (its nodes follow in checked_nodes order).
int first_index_check(const Program& p, int kernel);

/// The Error a failed check reports: check `check_plus_one - 1` of `checks` (the record's
/// kErrorCheck word) with the offending `index`, the size evaluated under `symbols`.
Error index_check_error(const std::vector<IndexCheck>& checks, int64_t check_plus_one, int64_t index,
                        const SymbolBindings& symbols);

}  // namespace fuse::ir
