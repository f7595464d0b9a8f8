// verify(Program): see ir/verifier.h.
#include <algorithm>

#include "ir/error.h"
#include "ir/kernel_forms.h"
#include "ir/verifier.h"

namespace fuse::ir {

namespace {

bool is_cpu_form(LoopForm f) { return f <= LoopForm::MatmulRows; }
bool is_both_targets_form(LoopForm f) { return f == LoopForm::ScanRows || f == LoopForm::Scatter; }

// Problems with kernel `k`'s loop form for its target (empty when it is one the body allows).
std::vector<std::string> check_form(const Kernel& k) {
  std::vector<std::string> problems;
  const Schedule& s = k.schedule;
  LoopForm f = s.form;
  auto bad = [&](const std::string& why) {
    problems.push_back("loop form " + std::string(loop_form_name(f)) + " " + why);
  };
  if (!is_both_targets_form(f) && (s.target == TargetKind::Cpu) != is_cpu_form(f)) bad("is not a form of target " + std::string(target_kind_name(s.target)));
  bool matmul_form = f == LoopForm::BlockedMatmul || f == LoopForm::MatmulRows || f == LoopForm::SharedTileMatmul;
  if (matmul_form != (k.kind == KernelKind::Matmul) && f != LoopForm::Interpreted && f != LoopForm::PerElement)
    bad("does not fit a " + std::string(kernel_kind_name(k.kind)) + " kernel");
  bool rows_form = f == LoopForm::ReductionRows || f == LoopForm::ColumnReduction || f == LoopForm::BlockPerRow;
  if (rows_form && k.kind != KernelKind::Reduction && k.kind != KernelKind::RowWise)
    bad("does not fit a " + std::string(kernel_kind_name(k.kind)) + " kernel");
  if ((f == LoopForm::ScanRows) != (k.kind == KernelKind::Scan) && f != LoopForm::Interpreted)
    bad("does not fit a " + std::string(kernel_kind_name(k.kind)) + " kernel");
  if ((f == LoopForm::Scatter) != (k.kind == KernelKind::Scatter) && f != LoopForm::Interpreted)
    bad("does not fit a " + std::string(kernel_kind_name(k.kind)) + " kernel");
  bool needs_row_order = f != LoopForm::Interpreted && f != LoopForm::PerElement && f != LoopForm::ScanRows &&
                         f != LoopForm::Scatter;
  if (needs_row_order && !results_in_row_order(k)) bad("needs the results in row order, which this kernel's outputs reorder");
  if ((f == LoopForm::SplitReduction && !reduces_to_one_element(k)) ||
      (f == LoopForm::TwoStage && !reduces_to_one_element(k, /*user_combiners=*/true)))
    bad("needs a reduction to single elements");
  if (f == LoopForm::SharedTileTranspose && transpose_inner_axis(k) < 0) bad("needs a kernel that reads an input across its rows");
  if (f == LoopForm::Contiguous && !elementwise_contiguous(k)) bad("needs every operand laid out like the space");
  if (f == LoopForm::ColumnReduction && !KernelAccess(k).column_reduction()) bad("needs a reduction over leading axes");
  if (f == LoopForm::BlockedMatmul && (s.cpu.mr <= 0 || s.cpu.nr <= 0 || s.cpu.kc <= 0 || s.cpu.mc <= 0 || s.cpu.nc <= 0))
    bad("needs positive mr, nr, kc, mc and nc");
  if (s.target == TargetKind::Cpu && (s.cpu.vector_width < 1 || s.cpu.grain < 1)) bad("needs vector_width and grain >= 1");
  if (f == LoopForm::TiledRows && s.cpu.transpose_block < 1) bad("needs transpose_block >= 1");
  if (f == LoopForm::SharedTileTranspose && (s.cuda.tile_rows < 1 || s.cuda.shared_cols < s.cuda.tile_rows))
    bad("needs tile_rows >= 1 and shared_cols >= tile_rows");
  if (f == LoopForm::SharedTileMatmul && (s.cuda.tile_k < 1 || s.cuda.thread_rows < 1 || s.cuda.thread_cols < 1))
    bad("needs tile_k, thread_rows and thread_cols >= 1");
  if (s.target == TargetKind::Cuda && (s.cuda.block_x < 1 || s.cuda.block_y < 1 || s.cuda.block_x * s.cuda.block_y > 1024))
    bad("needs a block of 1 to 1024 threads");
  return problems;
}

}  // namespace

std::vector<std::string> verify(const Program& p) {
  std::vector<std::string> problems;
  int buffers = static_cast<int>(p.buffers.size());
  auto valid = [&](BufferId b) { return b >= 0 && b < buffers; };
  for (const Buffer& b : p.buffers)
    if (b.role == BufferRole::Intermediate && (b.slot < 0 || b.slot >= p.num_slots))
      problems.push_back("buffer " + b.name + ": intermediate without a planned slot (slot " + std::to_string(b.slot) + " of " +
                         std::to_string(p.num_slots) + ")");
  for (const Kernel& k : p.kernels) {
    auto add = [&](const std::string& what) { problems.push_back(k.name + ": " + what); };
    for (const std::string& problem : verify(k.body)) add("body: " + problem);
    std::vector<NodeId> input_nodes;
    for (NodeId id = 0; id < static_cast<NodeId>(k.body.nodes.size()); ++id)
      if (k.body.node(id).kind == OpKind::Input) input_nodes.push_back(id);
    if (input_nodes.size() != k.inputs.size())
      add(std::to_string(k.inputs.size()) + " input buffers for " + std::to_string(input_nodes.size()) + " Input nodes");
    if (k.body.outputs.size() != k.outputs.size())
      add(std::to_string(k.outputs.size()) + " output buffers for " + std::to_string(k.body.outputs.size()) + " outputs");
    auto check_buffer = [&](BufferId b, const Node& n, const std::string& what) {
      if (!valid(b)) return add(what + " reads buffer " + std::to_string(b) + ", out of range");
      const Buffer& buffer = p.buffers[b];
      if (buffer.dtype != n.dtype || !(buffer.shape == n.shape))
        add(what + " is " + std::string(dtype_name(n.dtype)) + shape_str(n.shape) + " but buffer " + buffer.name + " is " +
            std::string(dtype_name(buffer.dtype)) + shape_str(buffer.shape));
    };
    for (size_t i = 0; i < std::min(input_nodes.size(), k.inputs.size()); ++i)
      check_buffer(k.inputs[i], k.body.node(input_nodes[i]), "input " + std::to_string(i));
    for (size_t o = 0; o < std::min(k.outputs.size(), k.body.outputs.size()); ++o)
      check_buffer(k.outputs[o], k.body.node(k.body.outputs[o].node), "output " + std::to_string(o));
    for (int a : k.axes)
      if (a < 0 || a >= static_cast<int>(k.space.size())) add("reduced axis " + std::to_string(a) + " outside the space " + shape_str(k.space));
    for (const std::string& problem : check_form(k)) add(problem);
  }
  // The launch order: every kernel once, and every buffer written before it is read.
  std::vector<int> seen(p.kernels.size(), 0);
  std::vector<bool> written(p.buffers.size(), false);
  for (const ProgramIO& in : p.inputs)
    if (valid(in.buffer)) written[in.buffer] = true;
    else problems.push_back("program input " + in.name + ": buffer out of range");
  for (const Buffer& b : p.buffers)
    if (b.role == BufferRole::Input) written[&b - p.buffers.data()] = true;
  for (int ki : p.launch_order) {
    if (ki < 0 || ki >= static_cast<int>(p.kernels.size())) {
      problems.push_back("launch order names kernel " + std::to_string(ki) + ", out of range");
      continue;
    }
    const Kernel& k = p.kernels[ki];
    if (seen[ki]++) problems.push_back("launch order runs " + k.name + " twice");
    for (BufferId b : k.inputs)
      if (valid(b) && !written[b]) problems.push_back(k.name + ": reads " + p.buffers[b].name + " before any kernel writes it");
    for (BufferId b : k.outputs)
      if (valid(b)) written[b] = true;
  }
  for (size_t ki = 0; ki < p.kernels.size(); ++ki)
    if (!seen[ki]) problems.push_back("launch order leaves out " + p.kernels[ki].name);
  for (const ProgramIO& out : p.outputs)
    if (!valid(out.buffer)) problems.push_back("program output " + out.name + ": buffer out of range");
    else if (!written[out.buffer]) problems.push_back("program output " + out.name + ": no kernel writes it");
  return problems;
}

void verify_or_throw(const Program& p, const std::string& stage) {
  std::vector<std::string> problems = verify(p);
  if (problems.empty()) return;
  std::string msg = "invalid program " + stage + ":";
  for (const std::string& problem : problems) msg += "\n  " + problem;
  throw Error(msg);
}

}  // namespace fuse::ir
