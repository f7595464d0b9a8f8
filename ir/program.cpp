#include "ir/program.h"

#include <cctype>
#include <cstdio>
#include <algorithm>
#include <map>

#include "ir/printer.h"

namespace fuse::ir {

std::string_view kernel_kind_name(KernelKind k) {
  switch (k) {
    case KernelKind::Elementwise: return "elementwise";
    case KernelKind::Reduction: return "reduction";
    case KernelKind::RowWise: return "rowwise";
    case KernelKind::Matmul: return "matmul";
    case KernelKind::Transpose: return "transpose";
    case KernelKind::Copy: return "copy";
    case KernelKind::Scan: return "scan";
    case KernelKind::Scatter: return "scatter";
  }
  return "?";
}

std::string_view buffer_role_name(BufferRole r) {
  switch (r) {
    case BufferRole::Input: return "input";
    case BufferRole::Output: return "output";
    case BufferRole::Intermediate: return "intermediate";
  }
  return "?";
}

std::string_view loop_form_name(LoopForm f) {
  switch (f) {
    case LoopForm::Interpreted: return "interpreted";
    case LoopForm::Contiguous: return "contiguous";
    case LoopForm::Rows: return "rows";
    case LoopForm::TiledRows: return "tiled_rows";
    case LoopForm::General: return "general";
    case LoopForm::ReductionRows: return "reduction_rows";
    case LoopForm::ColumnReduction: return "column_reduction";
    case LoopForm::SplitReduction: return "split_reduction";
    case LoopForm::BlockedMatmul: return "blocked_matmul";
    case LoopForm::MatmulRows: return "matmul_rows";
    case LoopForm::GridStride: return "grid_stride";
    case LoopForm::SharedTileTranspose: return "shared_tile_transpose";
    case LoopForm::BlockPerRow: return "block_per_row";
    case LoopForm::TwoStage: return "two_stage";
    case LoopForm::SharedTileMatmul: return "shared_tile_matmul";
    case LoopForm::PerElement: return "per_element";
    case LoopForm::ScanRows: return "scan_rows";
    case LoopForm::Scatter: return "scatter";
  }
  return "?";
}

std::string_view target_kind_name(TargetKind t) { return t == TargetKind::Cpu ? "cpu" : "cuda"; }

Dim parallel_iterations(const Kernel& k) {
  Dim n = 1;
  switch (k.kind) {
    case KernelKind::Reduction:
    case KernelKind::RowWise:
    case KernelKind::Scan:  // the rows along the scan axis
    case KernelKind::Scatter:  // index_add: its output's columns; histogram/bincount: one (split in chunks)
      for (size_t d = 0; d < k.space.size(); ++d)
        if (std::find(k.axes.begin(), k.axes.end(), static_cast<int>(d)) == k.axes.end()) n = n * k.space[d];
      return n;
    case KernelKind::Matmul:
      for (size_t d = 0; d + 1 < k.space.size(); ++d) n = n * k.space[d];
      return n;
    default: return num_elements(k.space);
  }
}

BufferId Program::find_buffer(const std::string& name) const {
  for (size_t i = 0; i < buffers.size(); ++i)
    if (buffers[i].name == name) return static_cast<BufferId>(i);
  return -1;
}

// Schedule fields as (key, value) pairs: the one description both printers use.
static std::vector<std::pair<std::string, std::string>> schedule_fields(const Kernel& k) {
  std::vector<std::pair<std::string, std::string>> f;
  auto add = [&](const std::string& key, auto value) {
    if constexpr (std::is_convertible_v<decltype(value), std::string_view>) f.emplace_back(key, std::string(value));
    else f.emplace_back(key, std::to_string(value));
  };
  const Schedule& s = k.schedule;
  add("target", target_kind_name(s.target));
  add("form", loop_form_name(s.form));
  if (s.target == TargetKind::Cpu) {
    if (s.form == LoopForm::Interpreted) return f;
    add("grain", s.cpu.grain);
    add("vector_width", s.cpu.vector_width);
    if (s.form == LoopForm::ReductionRows || s.form == LoopForm::SplitReduction) add("accumulators", s.cpu.accumulators);
    if (s.form == LoopForm::TiledRows) add("transpose_block", s.cpu.transpose_block);
    if (s.form == LoopForm::Contiguous || s.form == LoopForm::Rows || s.form == LoopForm::TiledRows ||
        s.form == LoopForm::ReductionRows)
      add("streaming_bytes", s.cpu.streaming_bytes);
    if (s.form == LoopForm::BlockedMatmul) {
      add("mc", s.cpu.mc);
      add("kc", s.cpu.kc);
      add("nc", s.cpu.nc);
      add("mr", s.cpu.mr);
      add("nr", s.cpu.nr);
      add("a_in_place", s.cpu.a_in_place ? 1 : 0);
    }
  } else {
    add("block_x", s.cuda.block_x);
    add("block_y", s.cuda.block_y);
    if (s.form == LoopForm::GridStride || s.form == LoopForm::TwoStage) add("items_per_thread", s.cuda.items_per_thread);
    if (s.form == LoopForm::GridStride) add("vector_bytes", s.cuda.vector_bytes);
    if (s.form == LoopForm::SharedTileTranspose) {
      add("tile_rows", s.cuda.tile_rows);
      add("shared_cols", s.cuda.shared_cols);
    }
    if (s.form == LoopForm::SharedTileMatmul) {
      add("tile_k", s.cuda.tile_k);
      add("thread_rows", s.cuda.thread_rows);
      add("thread_cols", s.cuda.thread_cols);
    }
  }
  return f;
}

static std::string buffer_list(const Program& p, const std::vector<BufferId>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + p.buffers[ids[i]].name;
  return s;
}

std::string print_program(const Program& p) {
  std::string s = "program {\n";
  for (const Buffer& b : p.buffers) {
    s += "  buffer " + b.name + " : " + std::string(dtype_name(b.dtype)) + shape_str(b.shape) + " " +
         std::string(buffer_role_name(b.role));
    if (b.slot >= 0) s += " slot=" + std::to_string(b.slot);
    s += "\n";
  }
  for (int ki : p.launch_order) {
    const Kernel& k = p.kernels[ki];
    s += "  kernel " + k.name + " " + std::string(kernel_kind_name(k.kind)) + " over " + shape_str(k.space);
    if (!k.axes.empty()) {
      s += " axes=[";
      for (size_t i = 0; i < k.axes.size(); ++i) s += (i ? ", " : "") + std::to_string(k.axes[i]);
      s += "]";
    }
    s += " (" + buffer_list(p, k.inputs) +
         ") -> (" + buffer_list(p, k.outputs) + ")\n    schedule:";
    for (const auto& [key, value] : schedule_fields(k)) s += " " + key + "=" + value;
    s += "\n";
    std::string body = print_graph(k.body);
    // Indent the body under its kernel.
    size_t start = 0;
    while (start < body.size()) {
      size_t end = body.find('\n', start);
      s += "    " + body.substr(start, end - start) + "\n";
      start = end + 1;
    }
  }
  for (const ProgramIO& o : p.outputs) s += "  output " + o.name + " = " + p.buffers[o.buffer].name + "\n";
  return s + "}\n";
}

static std::string json_string(const std::string& v) {
  std::string s = "\"";
  for (char c : v) {
    if (c == '"' || c == '\\') s += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      s += buf;
      continue;
    }
    s += c;
  }
  return s + "\"";
}

static std::string json_shape(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    s += i ? ", " : "";
    s += shape[i].is_constant() ? std::to_string(*shape[i].constant()) : json_string(shape[i].str());
  }
  return s + "]";
}

static std::string json_names(const Program& p, const std::vector<BufferId>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + json_string(p.buffers[ids[i]].name);
  return s + "]";
}

std::string program_to_json(const Program& p) {
  std::string s = "{\n  \"kernels\": [";
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    const Kernel& k = p.kernels[i];
    s += i ? ",\n    {" : "\n    {";
    s += "\"name\": " + json_string(k.name) + ", \"kind\": " + json_string(std::string(kernel_kind_name(k.kind)));
    s += ", \"ops\": [";
    bool first = true;
    for (const Node& n : k.body.nodes) {
      if (n.kind == OpKind::Input) continue;
      std::string op(op_kind_name(n.kind));
      if (n.kind == OpKind::Reduce) op += "." + std::string(reduce_kind_name(n.as<ReduceAttrs>().kind));
      if (n.kind == OpKind::Scan) op += "." + std::string(reduce_kind_name(n.as<ScanAttrs>().kind));
      s += (first ? "" : ", ") + json_string(op);
      first = false;
    }
    s += "], \"inputs\": " + json_names(p, k.inputs) + ", \"outputs\": " + json_names(p, k.outputs);
    s += ", \"schedule\": {";
    auto fields = schedule_fields(k);
    for (size_t f = 0; f < fields.size(); ++f) {
      bool numeric = !fields[f].second.empty() && (std::isdigit(static_cast<unsigned char>(fields[f].second[0])) ||
                                                   fields[f].second[0] == '-');
      s += (f ? ", " : "") + json_string(fields[f].first) + ": " +
           (numeric ? fields[f].second : json_string(fields[f].second));
    }
    s += "}}";
  }
  s += "\n  ],\n  \"buffers\": [";
  for (size_t i = 0; i < p.buffers.size(); ++i) {
    const Buffer& b = p.buffers[i];
    Dim bytes = b.bytes();
    s += i ? ",\n    {" : "\n    {";
    s += "\"name\": " + json_string(b.name) + ", \"dtype\": " + json_string(std::string(dtype_name(b.dtype))) +
         ", \"shape\": " + json_shape(b.shape) + ", \"bytes\": " +
         (bytes.is_constant() ? std::to_string(*bytes.constant()) : json_string(bytes.str())) +
         ", \"role\": " + json_string(std::string(buffer_role_name(b.role))) + ", \"slot\": " + std::to_string(b.slot) + "}";
  }
  s += "\n  ],\n  \"launch_order\": [";
  for (size_t i = 0; i < p.launch_order.size(); ++i)
    s += (i ? ", " : "") + json_string(p.kernels[p.launch_order[i]].name);
  auto io = [&](const std::vector<ProgramIO>& list) {
    std::string out = "[";
    for (size_t i = 0; i < list.size(); ++i)
      out += (i ? ", " : "") + std::string("{\"name\": ") + json_string(list[i].name) +
             ", \"buffer\": " + json_string(p.buffers[list[i].buffer].name) + "}";
    return out + "]";
  };
  s += "],\n  \"inputs\": " + io(p.inputs) + ",\n  \"outputs\": " + io(p.outputs) + "\n}\n";
  return s;
}

int64_t planned_peak_bytes(const Program& p, const SymbolBindings& symbols) {
  int64_t total = 0;
  std::map<int, int64_t> slot_bytes;
  for (const Buffer& b : p.buffers) {
    int64_t bytes = evaluate(b.bytes(), symbols);
    if (b.role != BufferRole::Intermediate) total += bytes;
    else slot_bytes[b.slot] = std::max(slot_bytes[b.slot], bytes);
  }
  for (const auto& [slot, bytes] : slot_bytes) total += bytes;
  return total;
}

SymbolBindings bind_program_inputs(const Program& p, const TensorMap& inputs) {
  // The Program's interface as a graph of its inputs, so inputs are checked as for any graph.
  Graph interface;
  for (const ProgramIO& in : p.inputs) {
    const Buffer& b = p.buffers[in.buffer];
    add_input(interface, in.name, b.dtype, b.shape);
  }
  SymbolBindings symbols = bind_inputs(interface, inputs);
  for (const Kernel& k : p.kernels) check_sizes(size_checks(k.body), symbols);  // np-views: index checks
  return symbols;
}

TensorMap interpret_program(const Program& p, const TensorMap& inputs) {
  SymbolBindings symbols = bind_program_inputs(p, inputs);

  std::map<BufferId, HostArray> held;        // inputs and outputs
  std::map<int, std::pair<BufferId, HostArray>> slots;  // intermediates: slot -> (owner, value)
  for (const ProgramIO& in : p.inputs) held[in.buffer] = inputs.at(in.name);
  auto read = [&](BufferId b) -> const HostArray& {
    if (p.buffers[b].role != BufferRole::Intermediate) return held.at(b);
    auto it = slots.find(p.buffers[b].slot);
    if (it == slots.end() || it->second.first != b)
      throw Error("internal error: buffer '" + p.buffers[b].name + "' was read after its slot was reused");
    return it->second.second;
  };
  for (int ki : p.launch_order) {
    const Kernel& k = p.kernels[ki];
    TensorMap args;
    for (BufferId b : k.inputs) args[p.buffers[b].name] = read(b);
    TensorMap results = interpret(k.body, args, symbols);
    for (BufferId b : k.outputs) {
      HostArray& value = results.at(p.buffers[b].name);
      if (p.buffers[b].role == BufferRole::Intermediate) slots[p.buffers[b].slot] = {b, std::move(value)};
      else held[b] = std::move(value);
    }
  }
  TensorMap outputs;
  for (const ProgramIO& o : p.outputs) outputs[o.name] = read(o.buffer);
  return outputs;
}

}  // namespace fuse::ir
