#include "passes/memory_plan.h"

#include <map>

namespace fuse::passes {

void plan_memory(ir::Program& p) {
  std::map<ir::BufferId, int> last_use;
  for (size_t step = 0; step < p.launch_order.size(); ++step)
    for (ir::BufferId b : p.kernels[p.launch_order[step]].inputs) last_use[b] = static_cast<int>(step);

  std::vector<ir::Dim> slot_bytes;
  std::vector<bool> slot_free;
  std::vector<ir::BufferId> live;
  for (size_t step = 0; step < p.launch_order.size(); ++step) {
    // Release what died before this kernel: a buffer is never reused by a kernel that reads it.
    std::erase_if(live, [&](ir::BufferId b) {
      if (last_use.count(b) && last_use[b] < static_cast<int>(step)) {
        slot_free[p.buffers[b].slot] = true;
        return true;
      }
      return false;
    });
    for (ir::BufferId b : p.kernels[p.launch_order[step]].outputs) {
      ir::Buffer& buf = p.buffers[b];
      if (buf.role != ir::BufferRole::Intermediate) continue;
      ir::Dim bytes = buf.bytes();
      buf.slot = -1;
      for (size_t s = 0; s < slot_bytes.size() && buf.slot < 0; ++s)
        if (slot_free[s] && slot_bytes[s] == bytes) buf.slot = static_cast<int>(s);
      if (buf.slot < 0) {
        buf.slot = static_cast<int>(slot_bytes.size());
        slot_bytes.push_back(bytes);
        slot_free.push_back(false);
      }
      slot_free[buf.slot] = false;
      live.push_back(b);
    }
  }
  p.num_slots = static_cast<int>(slot_bytes.size());
}

}  // namespace fuse::passes
