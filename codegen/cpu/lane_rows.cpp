// CPU row kernels over short rows, `lanes` rows at a time (ir::rows_across_lanes;
// codegen/cpu/emitter.h, "rows across lanes").
#include <algorithm>
#include <bit>
#include <functional>

#include "codegen/cpu/emitter.h"

namespace fuse::codegen {

using ir::DType;
using ir::LaneRead;
using ir::Node;
using ir::NodeId;
using ir::OpKind;

int64_t CpuKernelEmitter::lane_rows_length(int lanes) {
  if (lanes < 4 || !ir::rows_across_lanes(k_)) return 0;
  std::optional<int64_t> length = known_size(ir::num_elements(reduced_dims()));
  if (!length || *length < 1 || *length > lanes + lanes * 3 / 4) return 0;
  if (*length == lanes && lanes < 16 && full_space_outputs() > 0) return 0;  // rows of one vector (see emitter.h)
  lane_reads_ = ir::lane_reads(k_);
  return *length;
}

bool CpuKernelEmitter::transposes_lane_rows(int64_t length, int lanes) {
  int64_t transpose = lanes * std::bit_width(static_cast<uint64_t>(lanes) - 1);  // lanes log2(lanes) shuffles
  return length * (length - 1) > transpose + lanes + length;
}

mlir::Value CpuKernelEmitter::pick_lanes(const std::vector<mlir::Value>& sources,
                                         const std::vector<std::pair<int, int>>& picks) {
  int lanes = static_cast<int>(picks.size());
  // Sources that are the same value (a row's value stored over its elements) count once.
  auto canonical = [&](int s) {
    return static_cast<int>(std::find(sources.begin(), sources.end(), sources[s]) - sources.begin());
  };
  std::vector<int> order;  // the sources, in the order lanes first take them
  for (auto [s, lane] : picks)
    if (std::find(order.begin(), order.end(), canonical(s)) == order.end()) order.push_back(canonical(s));
  std::vector<int64_t> mask(lanes);
  auto shuffle = [&](mlir::Value a, mlir::Value c) { return b_.create<mlir::vector::ShuffleOp>(loc_, a, c, mask).getResult(); };
  if (order.size() == 1) {
    for (int l = 0; l < lanes; ++l) mask[l] = picks[l].second;
    return shuffle(sources[order[0]], sources[order[0]]);
  }
  for (int l = 0; l < lanes; ++l) {
    int s = canonical(picks[l].first);
    mask[l] = s == order[0] ? picks[l].second : s == order[1] ? lanes + picks[l].second : 0;
  }
  mlir::Value result = shuffle(sources[order[0]], sources[order[1]]);
  for (size_t k = 2; k < order.size(); ++k) {
    for (int l = 0; l < lanes; ++l) mask[l] = canonical(picks[l].first) == order[k] ? lanes + picks[l].second : l;
    result = shuffle(result, sources[order[k]]);
  }
  return result;
}

void CpuKernelEmitter::emit_lane_rows(mlir::Value from, mlir::Value to, int64_t length, int lanes) {
  std::vector<mlir::Value> streaming(k_.body.outputs.size());
  for (size_t o = 0; o < k_.body.outputs.size(); ++o) {
    DType t = k_.body.node(k_.body.outputs[o].node).dtype;
    if (full_space_outputs() == 1 && k_.body.node(k_.body.outputs[o].node).shape == k_.space &&
        streams_whole_lines(static_cast<int64_t>(ir::dtype_size(t)) * lanes))
      streaming[o] = streams_rows(output_slot_[o], t, bytes_moved_per_element(t), i64(length * lanes));
  }
  loop(from, to, lanes, [&](mlir::Value row) { emit_lane_row_group(row, length, lanes, streaming); });
}

void CpuKernelEmitter::emit_lane_row_group(mlir::Value first_row, int64_t length, int lanes,
                                          const std::vector<mlir::Value>& streaming) {
  lane_values_.clear();
  lane_first_row_ = first_row;
  lane_length_ = length;
  lane_count_ = lanes;
  lane_divisors_.clear();
  lane_reciprocals_.clear();
  scalar_.share_divisors(&lane_divisors_, &lane_reciprocals_);
  mlir::Value block = mul(first_row, i64(length));  // the rows' first element
  for (size_t o = 0; o < k_.body.outputs.size(); ++o) {
    NodeId out = k_.body.outputs[o].node;
    const Node& n = k_.body.node(out);
    if (!(n.shape == k_.space)) {  // element r is row r
      store(output_slot_[o], n.dtype, first_row, lane_rows_value(out, -1), lanes);
      continue;
    }
    std::vector<mlir::Value> columns;
    for (int64_t j = 0; j < length; ++j) columns.push_back(lane_rows_value(out, j));
    // Where element j of row l is, as (source, lane): lane l of column j, or, where the rows are
    // long enough to pay for it, lane j % lanes of vector (j / lanes) lanes + l after each
    // block of `lanes` columns (the last padded) is transposed in registers: a vector of the
    // output then draws on two or three rows, not on every column (length - 1 shuffles).
    std::vector<mlir::Value> sources = columns;
    std::function<std::pair<int, int>(int64_t, int64_t)> at = [](int64_t l, int64_t j) {
      return std::pair<int, int>{static_cast<int>(j), static_cast<int>(l)};
    };
    if (transposes_lane_rows(length, lanes)) {
      sources.clear();
      for (int64_t first = 0; first < length; first += lanes) {
        std::vector<mlir::Value> square;
        for (int64_t j = first; j < first + lanes; ++j) square.push_back(columns[std::min(j, length - 1)]);
        for (mlir::Value row : transpose_in_registers(b_, loc_, square)) sources.push_back(row);
      }
      at = [&](int64_t l, int64_t j) {
        return std::pair<int, int>{static_cast<int>(j / lanes * lanes + l), static_cast<int>(j % lanes)};
      };
    }
    // Vector v of the rows' block: lane m is element v lanes + m, of row (v lanes + m) / length.
    for (int64_t v = 0; v < length; ++v) {
      std::vector<std::pair<int, int>> picks;
      for (int64_t m = 0; m < lanes; ++m) {
        int64_t e = v * lanes + m;
        picks.push_back(at(e / length, e % length));
      }
      store_or_stream(streaming[o], output_slot_[o], n.dtype, add(block, i64(v * lanes)), pick_lanes(sources, picks), lanes);
    }
  }
  scalar_.share_divisors(nullptr, nullptr);
  lane_values_.clear();
  lane_divisors_.clear();
  lane_reciprocals_.clear();
}

mlir::Value CpuKernelEmitter::lane_rows_value(NodeId id, int64_t j) {
  LaneRead read = lane_reads_.at(id);
  bool by_element = read == LaneRead::Full || read == LaneRead::Column;
  std::pair<NodeId, int64_t> key{id, by_element ? j : -1};
  if (auto it = lane_values_.find(key); it != lane_values_.end()) return it->second;
  const Node& n = k_.body.node(id);
  int lanes = lane_count_;
  int64_t length = lane_length_;
  auto splat = [&](mlir::Value scalar, DType t) {
    return b_.create<mlir::vector::BroadcastOp>(loc_, lane_type(scalar_type(t), lanes), scalar).getResult();
  };
  mlir::Value v;
  switch (n.kind) {
    case OpKind::Input:
    case OpKind::Constant:
      if (read == LaneRead::Full) {
        // The rows' whole vectors, taken apart into their elements once: element j of row l is
        // lane (l length + j) % lanes of vector (l length + j) / lanes.
        mlir::Value block = mul(lane_first_row_, i64(length));
        if (length == lanes) {  // the rows' vectors are a square: transposed in registers
          std::vector<mlir::Value> rows;
          for (int64_t w = 0; w < length; ++w) rows.push_back(load(input_slot_.at(id), n.dtype, add(block, i64(w * lanes)), lanes));
          std::vector<mlir::Value> columns = transpose_in_registers(b_, loc_, rows);
          for (int64_t e = 0; e < length; ++e) lane_values_[{id, e}] = columns[e];
          return lane_values_.at(key);
        }
        if (length >= kMinGatheredLaneRow) {
          // Element j of the rows gathered (lanes l length + j), not shuffled out of the rows'
          // vectors: length - 1 shuffles each.
          mlir::Value first = element_address(input_slot_.at(id), n.dtype, block);
          auto offsets_type = mlir::VectorType::get({lanes}, b_.getI32Type());
          for (int64_t e = 0; e < length; ++e) {
            std::vector<int32_t> offsets;
            for (int64_t l = 0; l < lanes; ++l) offsets.push_back(static_cast<int32_t>(l * length + e));
            mlir::Value offset_vector =
                b_.create<mlir::arith::ConstantOp>(loc_, mlir::DenseElementsAttr::get(offsets_type, llvm::ArrayRef<int32_t>(offsets)));
            lane_values_[{id, e}] = gather(first, n.dtype, offset_vector, lanes);
          }
          return lane_values_.at(key);
        }
        std::vector<mlir::Value> vectors;
        for (int64_t w = 0; w < length; ++w) vectors.push_back(load(input_slot_.at(id), n.dtype, add(block, i64(w * lanes)), lanes));
        for (int64_t e = 0; e < length; ++e) {
          std::vector<std::pair<int, int>> picks;
          for (int64_t l = 0; l < lanes; ++l)
            picks.push_back({static_cast<int>((l * length + e) / lanes), static_cast<int>((l * length + e) % lanes)});
          lane_values_[{id, e}] = pick_lanes(vectors, picks);
        }
        return lane_values_.at(key);
      }
      v = load(input_slot_.at(id), n.dtype, lane_first_row_, lanes);  // laid out as the rows
      break;
    case OpKind::Reduce: {
      // Over the row's elements in order, from the identity, in the accumulator type: what the
      // interpreter computes, lane by lane.
      // An f32 sum of costly values (softmax's of exps) adds in f32, as the rows' form adds
      // within a block (sums_in_f32_blocks()): a row of at most 1.75 vectors is within one.
      const ir::ReduceAttrs& r = n.as<ir::ReduceAttrs>();
      bool f32_sum = sums_in_f32_blocks(id);
      DType acc_type = f32_sum ? DType::F32 : accumulator_type(id);
      mlir::Value acc = f32_sum ? constant(DType::F32, 0, 0, lanes) : accumulator_identity(id, lanes);
      for (int64_t e = 0; e < length; ++e) {
        mlir::Value x = lane_rows_value(n.inputs[0], e);
        if (f32_sum) {
          acc = b_.create<mlir::arith::AddFOp>(loc_, acc, x);
          continue;
        }
        x = to_accumulator(id, x, lanes);
        if (r.kind == ir::ReduceKind::Custom) {
          acc = scalar_fn(r.combiner, {acc, x}, lanes);
        } else if (ordered_max_min(id)) {  // a NaN sticks; of equal values the first stays
          // Where a NaN reaches every output anyway (softmax's max, tracks_nan()), `x > acc ? x :
          // acc` alone: one vmaxps, not four instructions.
          bool max = r.kind == ir::ReduceKind::Max;
          mlir::Value beyond = cmpf(max ? mlir::arith::CmpFPredicate::OGT : mlir::arith::CmpFPredicate::OLT, x, acc);
          if (tracks_nan(id)) beyond = b_.create<mlir::arith::OrIOp>(loc_, cmpf(mlir::arith::CmpFPredicate::UNO, x, x), beyond);
          acc = select(beyond, x, acc);
        } else {
          acc = combine(id, acc, x);
        }
      }
      if (r.kind == ir::ReduceKind::Mean) {
        if (f32_sum) acc = cast(acc, DType::F32, DType::F64, lanes);
        acc_type = accumulator_type(id);
        acc = b_.create<mlir::arith::DivFOp>(loc_, acc, constant(acc_type, static_cast<double>(length), length, lanes));
      }
      v = acc_type == n.dtype ? acc : cast(acc, acc_type, n.dtype, lanes);
      break;
    }
    case OpKind::Elementwise: {
      std::vector<mlir::Value> args;
      for (NodeId in : n.inputs) args.push_back(lane_rows_value(in, j));
      v = elementwise(id, args, lanes);
      break;
    }
    case OpKind::BroadcastTo: {
      NodeId from = n.inputs[0];
      if (read == LaneRead::Row) {
        v = lane_rows_value(from, -1);
      } else {  // Column: element j of the operand; Uniform: its one element
        DType t = k_.body.node(from).dtype;
        v = splat(load(input_slot_.at(from), t, i64(read == LaneRead::Column ? j : 0), 1), t);
      }
      break;
    }
    case OpKind::ExpandDims:
    case OpKind::Squeeze:
    case OpKind::Reshape: v = lane_rows_value(n.inputs[0], -1); break;
    default: throw ir::Error(fail_text("kernel " + k_.name + ": node %" + std::to_string(id) + " has no value across lanes"));
  }
  // A value of the whole row may divide each element's (softmax's e / sum): its reciprocal is
  // taken once (ScalarLowering::share_divisors).
  if (!by_element && ir::is_float(n.dtype)) lane_divisors_.insert(v.getAsOpaquePointer());
  lane_values_[key] = v;
  return v;
}

}  // namespace fuse::codegen
