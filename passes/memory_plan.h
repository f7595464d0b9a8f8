// Memory planning: intermediates share storage slots when their lifetimes do not overlap.
//
// Thread safety: mutates only the Program it is given; callers keep one Program per thread.
#pragma once

#include "ir/program.h"

namespace fuse::passes {

/// Assigns every intermediate buffer a slot. A buffer lives from the kernel that writes it to
/// the last kernel that reads it (in launch order); it takes a free slot of exactly its byte
/// size (sizes may be symbolic, so only equal sizes are interchangeable), else a new slot.
void plan_memory(ir::Program& p);

}  // namespace fuse::passes
