#include "ir/interpreter.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "ir/philox.h"

namespace fuse::ir {
namespace {

// Elements per column when evaluating an Elementwise body: keeps every column of the body in
// cache and the working memory bounded whatever the tensor size.
constexpr int64_t kChunk = 4096;

[[noreturn]] void fail(const Node& n, const std::string& message) {
  throw Error(std::string(op_kind_name(n.kind)) + ": " + message, n.loc);
}

ScalarValue load(const HostArray& a, int64_t i) {
  ScalarValue v;
  switch (a.dtype) {
    case DType::Bool: v.i = a.bytes[i] != 0; break;
    case DType::I32: v.i = a.as<int32_t>()[i]; break;
    case DType::I64: v.i = a.as<int64_t>()[i]; break;
    case DType::F32: v.f = a.as<float>()[i]; break;
    case DType::F64: v.f = a.as<double>()[i]; break;
  }
  return v;
}

void store(HostArray& a, int64_t i, const ScalarValue& v) {
  if (is_float(a.dtype)) a.set_f64(i, v.f);
  else a.set_i64(i, v.i);
}

// Calls f(i, offset) for the flat row-major indices i in [begin, end) of `shape`, where offset
// advances by strides[k] along axis k: the one loop behind every gather, broadcast and reduction.
template <class F>
void for_each_offset(const ConcreteShape& shape, const std::vector<int64_t>& strides, int64_t begin,
                     int64_t end, F&& f) {
  if (begin >= end) return;
  int rank = static_cast<int>(shape.size());
  std::vector<int64_t> idx(rank);
  int64_t rest = begin, offset = 0;
  for (int k = rank - 1; k >= 0; --k) {
    idx[k] = rest % shape[k];
    rest /= shape[k];
    offset += idx[k] * strides[k];
  }
  for (int64_t i = begin; i < end; ++i) {
    f(i, offset);
    for (int k = rank - 1; k >= 0; --k) {
      offset += strides[k];
      if (++idx[k] < shape[k]) break;
      offset -= strides[k] * shape[k];
      idx[k] = 0;
    }
  }
}

// Strides, one per axis of `out`, that read a row-major `in` broadcast to `out` (NumPy rules:
// aligned from the right, size-1 and missing dims read index 0).
std::vector<int64_t> broadcast_strides(const Node& n, const ConcreteShape& in, const ConcreteShape& out) {
  auto bad = [&] { fail(n, "operand shape " + shape_str(in) + " cannot be broadcast to " + shape_str(out)); };
  if (in.size() > out.size()) bad();
  std::vector<int64_t> in_strides = row_major_strides(in);
  std::vector<int64_t> strides(out.size(), 0);
  size_t lead = out.size() - in.size();
  for (size_t k = 0; k < in.size(); ++k) {
    if (in[k] == out[lead + k]) strides[lead + k] = in_strides[k];
    else if (in[k] != 1) bad();
  }
  return strides;
}

HostArray gather(const HostArray& in, ConcreteShape shape, const std::vector<int64_t>& strides) {
  HostArray out(in.dtype, std::move(shape));
  size_t width = dtype_size(in.dtype);
  const uint8_t* src = in.bytes.data();
  uint8_t* dst = out.bytes.data();
  for_each_offset(out.shape, strides, 0, out.size(), [&](int64_t i, int64_t offset) {
    std::memcpy(dst + i * width, src + offset * width, width);
  });
  return out;
}

// Evaluates a ScalarFn column-wise: each scalar node over a whole column of elements at once,
// one dispatch per node and column instead of a walk of the DAG per element.
struct ColumnEvaluator {
  explicit ColumnEvaluator(const ScalarFn& f) : fn(f), storage(f.nodes.size()), columns(f.nodes.size()) {}

  // params[k] points to `len` values of parameter k. Results stay valid until the next run.
  void run(const std::vector<const ScalarValue*>& params, int64_t len) {
    for (size_t id = 0; id < fn.nodes.size(); ++id) {
      const ScalarNode& node = fn.nodes[id];
      std::vector<ScalarValue>& column = storage[id];
      if (node.op == ScalarOp::Param) {
        columns[id] = params[node.param];
        continue;
      }
      if (node.op == ScalarOp::Literal) {
        if (static_cast<int64_t>(column.size()) < len) column.assign(len, node.value);
        columns[id] = column.data();
        continue;
      }
      column.resize(len);
      const ScalarValue* args[3] = {};
      for (int k = 0; k < node.arity(); ++k) args[k] = columns[node.args[k]];
      // As in evaluate_scalar_fn: the operand dtype is the first value operand's.
      DType operand = fn.nodes[node.args[node.op == ScalarOp::Select ? 1 : 0]].dtype;
      ScalarValue values[3];
      for (int64_t e = 0; e < len; ++e) {
        for (int k = 0; k < node.arity(); ++k) values[k] = args[k][e];
        column[e] = evaluate_scalar_op(node.op, operand, node.dtype, values);
      }
      columns[id] = column.data();
    }
  }
  const ScalarValue* result() const { return columns[fn.results[0]]; }

  const ScalarFn& fn;
  std::vector<std::vector<ScalarValue>> storage;  // per node: its column (unused for params)
  std::vector<const ScalarValue*> columns;        // per node: where its column is
};

HostArray eval_elementwise(const Node& n, const std::vector<const HostArray*>& ops, const ConcreteShape& shape) {
  const ScalarFn& body = n.as<ElementwiseAttrs>().body;
  if (body.params.size() != ops.size() || body.results.size() != 1 || body.result_dtype() != n.dtype)
    fail(n, "the body does not match the node's operands and dtype");
  std::vector<std::vector<int64_t>> strides;
  for (size_t k = 0; k < ops.size(); ++k) {
    if (ops[k]->dtype != body.params[k])
      fail(n, "operand " + std::to_string(k) + " is " + std::string(dtype_name(ops[k]->dtype)) +
                  " but the body takes " + std::string(dtype_name(body.params[k])));
    strides.push_back(broadcast_strides(n, ops[k]->shape, shape));
  }
  HostArray out(n.dtype, shape);
  ColumnEvaluator eval(body);
  std::vector<std::vector<ScalarValue>> columns(ops.size());
  std::vector<const ScalarValue*> params(ops.size());
  for (int64_t begin = 0; begin < out.size(); begin += kChunk) {
    int64_t end = std::min(out.size(), begin + kChunk);
    for (size_t k = 0; k < ops.size(); ++k) {
      columns[k].resize(end - begin);
      for_each_offset(shape, strides[k], begin, end,
                      [&](int64_t i, int64_t offset) { columns[k][i - begin] = load(*ops[k], offset); });
      params[k] = columns[k].data();
    }
    eval.run(params, end - begin);
    const ScalarValue* result = eval.result();
    for (int64_t i = begin; i < end; ++i) store(out, i, result[i - begin]);
  }
  return out;
}

// One output element of a built-in reduction: folds in[base + offset] over `offsets`.
ScalarValue fold_builtin(ReduceKind kind, const HostArray& in, int64_t base, const std::vector<int64_t>& offsets,
                         DType result) {
  bool floats = is_float(in.dtype);
  if (kind == ReduceKind::Any || kind == ReduceKind::All) {
    bool want = kind == ReduceKind::Any;  // the value that decides the fold
    for (int64_t offset : offsets) {
      bool truth = floats ? in.get_f64(base + offset) != 0.0 : in.get_i64(base + offset) != 0;
      if (truth == want) return ScalarValue::of_int(want, DType::Bool);
    }
    return ScalarValue::of_int(!want, DType::Bool);
  }
  if (floats || kind == ReduceKind::Mean) {
    constexpr double inf = std::numeric_limits<double>::infinity();
    double acc = kind == ReduceKind::Prod ? 1.0 : kind == ReduceKind::Max ? -inf : kind == ReduceKind::Min ? inf : 0.0;
    for (int64_t offset : offsets) {
      double x = in.get_f64(base + offset);
      switch (kind) {
        case ReduceKind::Prod: acc *= x; break;
        case ReduceKind::Max: if (std::isnan(x) || x > acc) acc = x; break;  // NaN sticks
        case ReduceKind::Min: if (std::isnan(x) || x < acc) acc = x; break;
        default: acc += x; break;
      }
    }
    if (kind == ReduceKind::Mean) acc /= static_cast<double>(offsets.size());
    return ScalarValue::of(acc, result);
  }
  int64_t lowest = in.dtype == DType::Bool ? 0
                   : in.dtype == DType::I32 ? std::numeric_limits<int32_t>::min()
                                            : std::numeric_limits<int64_t>::min();
  int64_t highest = in.dtype == DType::Bool ? 1
                    : in.dtype == DType::I32 ? std::numeric_limits<int32_t>::max()
                                             : std::numeric_limits<int64_t>::max();
  if (kind == ReduceKind::Max || kind == ReduceKind::Min) {
    int64_t acc = kind == ReduceKind::Max ? lowest : highest;
    for (int64_t offset : offsets) {
      int64_t x = in.get_i64(base + offset);
      acc = kind == ReduceKind::Max ? std::max(acc, x) : std::min(acc, x);
    }
    return ScalarValue::of_int(acc, result);
  }
  uint64_t acc = kind == ReduceKind::Prod ? 1 : 0;  // unsigned: wraps instead of overflowing
  for (int64_t offset : offsets) {
    uint64_t x = static_cast<uint64_t>(in.get_i64(base + offset));
    acc = kind == ReduceKind::Prod ? acc * x : acc + x;
  }
  return ScalarValue::of_int(static_cast<int64_t>(acc), result);
}

// One output element of argmax/argmin: the position (in `offsets`' order) of the first extreme;
// the first NaN wins outright, as in NumPy.
ScalarValue fold_arg(const Node& n, const HostArray& in, int64_t base, const std::vector<int64_t>& offsets) {
  if (offsets.empty()) fail(n, "attempt to get " + std::string(reduce_kind_name(n.as<ReduceAttrs>().kind)) + " of an empty sequence");
  bool is_max = n.as<ReduceAttrs>().kind == ReduceKind::ArgMax;
  int64_t best = 0;
  if (is_float(in.dtype)) {
    double v = in.get_f64(base + offsets[0]);
    for (size_t i = 1; i < offsets.size() && !std::isnan(v); ++i) {
      double x = in.get_f64(base + offsets[i]);
      if (std::isnan(x) || (is_max ? x > v : x < v)) v = x, best = static_cast<int64_t>(i);
    }
  } else {
    int64_t v = in.get_i64(base + offsets[0]);
    for (size_t i = 1; i < offsets.size(); ++i) {
      int64_t x = in.get_i64(base + offsets[i]);
      if (is_max ? x > v : x < v) v = x, best = static_cast<int64_t>(i);
    }
  }
  return ScalarValue::of_int(best, DType::I64);
}

// An inclusive scan along one axis: sums and products accumulate as fold_builtin's do (f64 for
// floats, wrapping u64 for integers) and each prefix is stored in the node's dtype.
HostArray eval_scan(const Node& n, const HostArray& in, const ConcreteShape& shape) {
  const ScanAttrs& attrs = n.as<ScanAttrs>();
  if (attrs.axis < 0 || attrs.axis >= in.rank() || in.shape != shape)
    fail(n, "bad scan axis " + std::to_string(attrs.axis) + " for operand shape " + shape_str(in.shape));
  if (reduce_result_dtype(attrs.kind, in.dtype) != n.dtype)
    fail(n, "a scan of " + std::string(dtype_name(in.dtype)) + " is not " + std::string(dtype_name(n.dtype)));
  bool prod = attrs.kind == ReduceKind::Prod;
  int64_t length = in.shape[attrs.axis], stride = row_major_strides(in.shape)[attrs.axis];
  HostArray out(n.dtype, shape);
  if (length == 0) return out;
  for (int64_t first = 0; first < in.size(); ++first) {
    if ((first / stride) % length != 0) continue;  // not the start of a line along the axis
    if (is_float(in.dtype)) {
      double acc = prod ? 1.0 : 0.0;
      for (int64_t i = 0, at = first; i < length; ++i, at += stride) {
        acc = prod ? acc * in.get_f64(at) : acc + in.get_f64(at);
        store(out, at, ScalarValue::of(acc, n.dtype));
      }
    } else {
      uint64_t acc = prod ? 1 : 0;  // unsigned: wraps instead of overflowing
      for (int64_t i = 0, at = first; i < length; ++i, at += stride) {
        uint64_t x = static_cast<uint64_t>(in.get_i64(at));
        acc = prod ? acc * x : acc + x;
        store(out, at, ScalarValue::of_int(static_cast<int64_t>(acc), n.dtype));
      }
    }
  }
  return out;
}

// A custom reduction, column-wise over the output elements: each step applies the combiner to
// every output's accumulator and its next element, keeping each output's row-major order.
void fold_custom(const Node& n, const HostArray& in, const ConcreteShape& kept_shape,
                 const std::vector<int64_t>& kept_strides, const std::vector<int64_t>& offsets, HostArray& out) {
  const ReduceAttrs& attrs = n.as<ReduceAttrs>();
  const ScalarFn& combiner = attrs.combiner;
  if (combiner.params.size() != 2 || combiner.results.size() != 1 || combiner.params[0] != n.dtype ||
      combiner.params[1] != n.dtype || combiner.result_dtype() != n.dtype || in.dtype != n.dtype)
    fail(n, "the combiner must take and return " + std::string(dtype_name(in.dtype)));
  ColumnEvaluator eval(combiner);
  std::vector<ScalarValue> acc, x;
  std::vector<int64_t> bases;
  for (int64_t begin = 0; begin < out.size(); begin += kChunk) {
    int64_t end = std::min(out.size(), begin + kChunk), len = end - begin;
    bases.resize(len);
    for_each_offset(kept_shape, kept_strides, begin, end,
                    [&](int64_t i, int64_t offset) { bases[i - begin] = offset; });
    acc.assign(len, attrs.identity);
    x.resize(len);
    std::vector<const ScalarValue*> params = {acc.data(), x.data()};
    for (int64_t offset : offsets) {
      for (int64_t i = 0; i < len; ++i) x[i] = load(in, bases[i] + offset);
      eval.run(params, len);
      if (eval.result() != acc.data()) std::copy(eval.result(), eval.result() + len, acc.begin());
    }
    for (int64_t i = 0; i < len; ++i) store(out, begin + i, acc[i]);
  }
}

HostArray eval_reduce(const Node& n, const HostArray& in, const ConcreteShape& shape) {
  const ReduceAttrs& attrs = n.as<ReduceAttrs>();
  std::vector<bool> reduced(in.rank(), false);
  for (size_t k = 0; k < attrs.axes.size(); ++k) {
    int axis = attrs.axes[k];
    if (axis < 0 || axis >= in.rank() || (k > 0 && axis <= attrs.axes[k - 1]))
      fail(n, "bad reduction axes for operand shape " + shape_str(in.shape));
    reduced[axis] = true;
  }
  std::vector<int64_t> strides = row_major_strides(in.shape);
  ConcreteShape kept_shape, red_shape, out_shape;
  std::vector<int64_t> kept_strides, red_strides;
  for (int k = 0; k < in.rank(); ++k) {
    if (reduced[k]) {
      red_shape.push_back(in.shape[k]);
      red_strides.push_back(strides[k]);
      if (attrs.keepdims) out_shape.push_back(1);
    } else {
      kept_shape.push_back(in.shape[k]);
      kept_strides.push_back(strides[k]);
      out_shape.push_back(in.shape[k]);
    }
  }
  if (out_shape != shape)
    fail(n, "operand shape " + shape_str(in.shape) + " reduces to " + shape_str(out_shape) + ", not " +
                shape_str(shape));
  // Offsets of one output's reduced elements, in their row-major order.
  std::vector<int64_t> offsets(num_elements(red_shape));
  for_each_offset(red_shape, red_strides, 0, static_cast<int64_t>(offsets.size()),
                  [&](int64_t i, int64_t offset) { offsets[i] = offset; });
  HostArray out(n.dtype, shape);
  if (attrs.kind == ReduceKind::Custom) {
    fold_custom(n, in, kept_shape, kept_strides, offsets, out);
    return out;
  }
  if (reduce_result_dtype(attrs.kind, in.dtype) != n.dtype)
    fail(n, "a " + std::string(reduce_kind_name(attrs.kind)) + " of " + std::string(dtype_name(in.dtype)) +
                " is not " + std::string(dtype_name(n.dtype)));
  bool arg = attrs.kind == ReduceKind::ArgMax || attrs.kind == ReduceKind::ArgMin;
  for_each_offset(kept_shape, kept_strides, 0, out.size(), [&](int64_t o, int64_t base) {
    store(out, o, arg ? fold_arg(n, in, base, offsets) : fold_builtin(attrs.kind, in, base, offsets, n.dtype));
  });
  return out;
}

// The matmul loops over operands already converted to the result dtype. Acc is double for
// floats and uint64_t (wrapping) for integers. The i-k-j order keeps rows in cache and still
// sums each output in increasing k.
template <class Acc>
void matmul_loops(const HostArray& a, const HostArray& b, const std::vector<int64_t>& a_batches,
                  const std::vector<int64_t>& b_batches, int64_t m, int64_t k_size, int64_t n_size, HostArray& out) {
  auto values = [](const HostArray& x) {
    std::vector<Acc> v(x.size());
    for (int64_t i = 0; i < x.size(); ++i) {
      if constexpr (std::is_same_v<Acc, double>) v[i] = x.get_f64(i);
      else v[i] = static_cast<uint64_t>(x.get_i64(i));
    }
    return v;
  };
  std::vector<Acc> av = values(a), bv = values(b), acc(n_size);
  for (size_t batch = 0; batch < a_batches.size(); ++batch) {
    for (int64_t i = 0; i < m; ++i) {
      std::fill(acc.begin(), acc.end(), Acc(0));
      for (int64_t k = 0; k < k_size; ++k) {
        Acc aik = av[a_batches[batch] + i * k_size + k];
        const Acc* brow = bv.data() + b_batches[batch] + k * n_size;
        for (int64_t j = 0; j < n_size; ++j) acc[j] += aik * brow[j];
      }
      int64_t row = (static_cast<int64_t>(batch) * m + i) * n_size;
      for (int64_t j = 0; j < n_size; ++j) {
        if constexpr (std::is_same_v<Acc, double>) out.set_f64(row + j, acc[j]);
        else out.set_i64(row + j, static_cast<int64_t>(acc[j]));
      }
    }
  }
}

HostArray eval_matmul(const Node& n, const HostArray& a_in, const HostArray& b_in, const ConcreteShape& shape) {
  if (a_in.rank() == 0 || b_in.rank() == 0) fail(n, "operands must have at least 1 dim");
  HostArray a = a_in.dtype == n.dtype ? a_in : a_in.cast(n.dtype);
  HostArray b = b_in.dtype == n.dtype ? b_in : b_in.cast(n.dtype);
  ConcreteShape as = a.rank() == 1 ? ConcreteShape{1, a.shape[0]} : a.shape;
  ConcreteShape bs = b.rank() == 1 ? ConcreteShape{b.shape[0], 1} : b.shape;
  int64_t m = as[as.size() - 2], k_size = as.back(), n_size = bs.back();
  if (bs[bs.size() - 2] != k_size)
    fail(n, "shapes " + shape_str(a.shape) + " and " + shape_str(b.shape) + " have different contracted dims");
  ConcreteShape a_batch(as.begin(), as.end() - 2), b_batch(bs.begin(), bs.end() - 2);
  ConcreteShape batch(std::max(a_batch.size(), b_batch.size()), 1);
  for (size_t i = 0; i < batch.size(); ++i) {  // NumPy broadcasting, aligned from the right
    int64_t da = i < a_batch.size() ? a_batch[a_batch.size() - 1 - i] : 1;
    int64_t db = i < b_batch.size() ? b_batch[b_batch.size() - 1 - i] : 1;
    if (da != db && da != 1 && db != 1)
      fail(n, "batch dims of " + shape_str(a.shape) + " and " + shape_str(b.shape) + " cannot be broadcast");
    batch[batch.size() - 1 - i] = da == 1 ? db : da;
  }
  ConcreteShape out_shape = batch;
  if (a.rank() > 1) out_shape.push_back(m);
  if (b.rank() > 1) out_shape.push_back(n_size);
  if (out_shape != shape)
    fail(n, "operand shapes give " + shape_str(out_shape) + ", not " + shape_str(shape));
  // Start offsets of each batch's matrix in a and b.
  auto batch_offsets = [&](const ConcreteShape& own, int64_t matrix_size) {
    std::vector<int64_t> strides = broadcast_strides(n, own, batch);
    std::vector<int64_t> offsets(num_elements(batch));
    for_each_offset(batch, strides, 0, static_cast<int64_t>(offsets.size()),
                    [&](int64_t i, int64_t offset) { offsets[i] = offset * matrix_size; });
    return offsets;
  };
  std::vector<int64_t> a_batches = batch_offsets(a_batch, m * k_size);
  std::vector<int64_t> b_batches = batch_offsets(b_batch, k_size * n_size);
  HostArray out(n.dtype, shape);
  if (is_float(n.dtype)) matmul_loops<double>(a, b, a_batches, b_batches, m, k_size, n_size, out);
  else matmul_loops<uint64_t>(a, b, a_batches, b_batches, m, k_size, n_size, out);
  return out;
}

HostArray eval_permute(const Node& n, const HostArray& in, const ConcreteShape& shape) {
  const std::vector<int>& perm = n.as<PermuteAttrs>().perm;
  std::vector<bool> seen(in.rank(), false);
  bool ok = static_cast<int>(perm.size()) == in.rank();
  for (size_t k = 0; ok && k < perm.size(); ++k) {
    ok = perm[k] >= 0 && perm[k] < in.rank() && !seen[perm[k]];
    if (ok) seen[perm[k]] = true;
  }
  if (!ok) fail(n, "the permutation does not fit operand shape " + shape_str(in.shape));
  std::vector<int64_t> in_strides = row_major_strides(in.shape), strides;
  ConcreteShape out_shape;
  for (int axis : perm) {
    strides.push_back(in_strides[axis]);
    out_shape.push_back(in.shape[axis]);
  }
  if (out_shape != shape) fail(n, "operand shape " + shape_str(in.shape) + " permutes to " + shape_str(out_shape));
  return gather(in, shape, strides);
}

// ---- np-views: slice, pad and concatenate as per-axis index maps

// out[i0, i1, ...] = in[maps[0][i0], maps[1][i1], ...]; any entry -1 gives `fill` instead.
HostArray gather_axes(const HostArray& in, const ConcreteShape& shape, const std::vector<std::vector<int64_t>>& maps,
                      const ScalarValue& fill) {
  HostArray out(in.dtype, shape);
  if (out.size() == 0) return out;
  size_t width = dtype_size(in.dtype);
  std::vector<int64_t> in_strides = row_major_strides(in.shape);
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t i = 0; i < out.size(); ++i) {
    int64_t offset = 0;
    bool inside = true;
    for (size_t k = 0; k < shape.size(); ++k) {
      int64_t j = maps[k][idx[k]];
      inside = inside && j >= 0;
      offset += j * in_strides[k];
    }
    if (inside) std::memcpy(out.bytes.data() + i * width, in.bytes.data() + offset * width, width);
    else store(out, i, fill);
    for (size_t k = shape.size(); k-- > 0;) {
      if (++idx[k] < shape[k]) break;
      idx[k] = 0;
    }
  }
  return out;
}

HostArray eval_slice(const Node& n, const HostArray& in, const ConcreteShape& shape, const SymbolBindings& symbols) {
  const SliceAttrs& a = n.as<SliceAttrs>();
  if (in.shape.size() != shape.size()) fail(n, "operand shape " + shape_str(in.shape) + " has another rank");
  std::vector<std::vector<int64_t>> maps(shape.size());
  for (size_t k = 0; k < shape.size(); ++k) {
    int64_t start = shape[k] > 0 ? evaluate(a.starts[k], symbols) : 0;
    for (int64_t i = 0; i < shape[k]; ++i) {
      int64_t j = start + a.steps[k] * i;
      if (j < 0 || j >= in.shape[k])
        fail(n, "index " + std::to_string(j) + " of axis " + std::to_string(k) + " is outside operand shape " +
                    shape_str(in.shape));
      maps[k].push_back(j);
    }
  }
  return gather_axes(in, shape, maps, ScalarValue{});
}

}  // namespace

int64_t pad_source_index(PadMode mode, int64_t i, int64_t n) {
  if (i >= 0 && i < n) return i;
  if (mode == PadMode::Constant || n == 0) return -1;
  if (mode == PadMode::Edge || n == 1) return i < 0 ? 0 : n - 1;
  int64_t period = 2 * (n - 1);
  int64_t m = ((i % period) + period) % period;
  return m < n ? m : period - m;
}

namespace {

HostArray eval_pad(const Node& n, const HostArray& in, const ConcreteShape& shape, const SymbolBindings& symbols) {
  const PadAttrs& a = n.as<PadAttrs>();
  std::vector<std::vector<int64_t>> maps(shape.size());
  for (size_t k = 0; k < shape.size(); ++k) {
    int64_t before = evaluate(a.before[k], symbols);
    if (before + in.shape[k] + evaluate(a.after[k], symbols) != shape[k])
      fail(n, "operand shape " + shape_str(in.shape) + " does not pad to " + shape_str(shape));
    for (int64_t i = 0; i < shape[k]; ++i) {
      int64_t j = pad_source_index(a.mode, i - before, in.shape[k]);
      if (j < 0 && a.mode != PadMode::Constant) fail(n, "cannot extend the empty axis " + std::to_string(k));
      maps[k].push_back(j);
    }
  }
  return gather_axes(in, shape, maps, a.value);
}

HostArray eval_concatenate(const Node& n, const std::vector<const HostArray*>& operands, const ConcreteShape& shape) {
  int axis = n.as<ConcatenateAttrs>().axis;
  HostArray out(n.dtype, shape);
  size_t width = dtype_size(n.dtype);
  // Row-major: the output is outer blocks, each the operands' blocks one after another.
  int64_t outer = 1;
  for (int k = 0; k < axis; ++k) outer *= shape[k];
  int64_t out_block = outer == 0 ? 0 : out.size() / std::max<int64_t>(outer, 1);
  int64_t at = 0;
  for (const HostArray* op : operands) {
    if (op->shape.size() != shape.size()) fail(n, "operand shape " + shape_str(op->shape) + " has another rank");
    int64_t block = outer == 0 ? 0 : op->size() / outer;
    if (block > 0)  // an empty operand's bytes may have no storage at all (memcpy from null is UB)
      for (int64_t o = 0; o < outer; ++o)
        std::memcpy(out.bytes.data() + (o * out_block + at) * width, op->bytes.data() + o * block * width, block * width);
    at += block;
  }
  if (at != out_block) fail(n, "operands do not add up to shape " + shape_str(shape));
  return out;
}

HostArray eval_rand(uint64_t seed, const ConcreteShape& shape) {
  HostArray out(DType::F32, shape);
  float* data = out.as<float>();
  for (int64_t i = 0; i < out.size(); ++i) data[i] = rand_uniform(seed, static_cast<uint64_t>(i));
  return out;
}

// ---- gather/scatter (issue 16) ----

// idx[i] normalized into [0, size) (negative counts from the end); throws index_error if outside.
int64_t checked_index(const Node& n, int64_t index, int64_t size, int axis) {
  int64_t v = index < 0 ? index + size : index;
  if (v < 0 || v >= size) throw index_error(n.kind, index, size, axis, n.loc);
  return v;
}

// x's shape split around `axis`: the elements before it (outer), its size, the ones after it.
struct AxisSplit {
  int64_t outer = 1, size = 1, inner = 1;
};
AxisSplit split_at(const ConcreteShape& shape, int axis) {
  AxisSplit s;
  for (int k = 0; k < axis; ++k) s.outer *= shape[k];
  s.size = shape[axis];
  for (size_t k = axis + 1; k < shape.size(); ++k) s.inner *= shape[k];
  return s;
}

HostArray eval_take(const Node& n, const HostArray& x, const HostArray& idx, const ConcreteShape& shape) {
  int axis = n.as<GatherAttrs>().axis;
  if (axis < 0 || axis >= x.rank()) fail(n, "axis out of range for operand shape " + shape_str(x.shape));
  AxisSplit s = split_at(x.shape, axis);
  HostArray out(n.dtype, shape);
  if (s.outer * idx.size() * s.inner != out.size()) fail(n, "operand shapes do not give " + shape_str(shape));
  size_t width = dtype_size(x.dtype);
  std::vector<int64_t> rows(idx.size());
  for (int64_t j = 0; j < idx.size(); ++j) rows[j] = checked_index(n, idx.get_i64(j), s.size, axis);
  uint8_t* dst = out.bytes.data();
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t j = 0; j < idx.size(); ++j) {
      const uint8_t* src = x.bytes.data() + ((o * s.size + rows[j]) * s.inner) * width;
      std::memcpy(dst, src, s.inner * width);
      dst += s.inner * width;
    }
  return out;
}

HostArray eval_take_along_axis(const Node& n, const HostArray& x, const HostArray& idx, const ConcreteShape& shape) {
  int axis = n.as<GatherAttrs>().axis;
  int rank = x.rank();
  if (axis < 0 || axis >= rank || idx.rank() != rank || static_cast<int>(shape.size()) != rank)
    fail(n, "operand shapes " + shape_str(x.shape) + " and " + shape_str(idx.shape) + " do not fit axis " +
                std::to_string(axis));
  // Broadcast strides of x (its `axis` read through the index) and of idx over the result.
  std::vector<int64_t> xs = row_major_strides(x.shape), is = row_major_strides(idx.shape);
  std::vector<int64_t> x_strides(rank, 0), idx_strides(rank, 0);
  for (int k = 0; k < rank; ++k) {
    if (k != axis && x.shape[k] != 1 && x.shape[k] != shape[k]) fail(n, "x does not broadcast to " + shape_str(shape));
    if (idx.shape[k] != 1 && idx.shape[k] != shape[k]) fail(n, "indices do not broadcast to " + shape_str(shape));
    if (k != axis && x.shape[k] != 1) x_strides[k] = xs[k];
    if (idx.shape[k] != 1) idx_strides[k] = is[k];
  }
  HostArray out(n.dtype, shape);
  size_t width = dtype_size(x.dtype);
  std::vector<int64_t> x_base(out.size());
  for_each_offset(shape, x_strides, 0, out.size(), [&](int64_t i, int64_t offset) { x_base[i] = offset; });
  for_each_offset(shape, idx_strides, 0, out.size(), [&](int64_t i, int64_t offset) {
    int64_t v = checked_index(n, idx.get_i64(offset), x.shape[axis], axis);
    std::memcpy(out.bytes.data() + i * width, x.bytes.data() + (x_base[i] + v * xs[axis]) * width, width);
  });
  return out;
}

HostArray eval_index_add(const Node& n, const HostArray& x, const HostArray& idx, const HostArray& values,
                         const ConcreteShape& shape) {
  int axis = n.as<GatherAttrs>().axis;
  if (axis < 0 || axis >= x.rank() || idx.rank() != 1 || values.dtype != x.dtype || shape != x.shape)
    fail(n, "operands do not fit x " + shape_str(x.shape) + " along axis " + std::to_string(axis));
  ConcreteShape expected = x.shape;
  expected[axis] = idx.size();
  if (values.shape != expected)
    fail(n, "values have shape " + shape_str(values.shape) + ", not " + shape_str(expected));
  AxisSplit s = split_at(x.shape, axis);
  std::vector<int64_t> rows(idx.size());
  for (int64_t j = 0; j < idx.size(); ++j) rows[j] = checked_index(n, idx.get_i64(j), s.size, axis);
  HostArray out = x;
  bool floats = is_float(x.dtype);
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t j = 0; j < idx.size(); ++j)
      for (int64_t i = 0; i < s.inner; ++i) {
        int64_t to = (o * s.size + rows[j]) * s.inner + i, from = (o * idx.size() + j) * s.inner + i;
        if (floats) out.set_f64(to, out.get_f64(to) + values.get_f64(from));  // rounds once per add
        else out.set_i64(to, static_cast<int64_t>(static_cast<uint64_t>(out.get_i64(to)) +
                                                  static_cast<uint64_t>(values.get_i64(from))));
      }
  return out;
}

HostArray eval_bincount(const Node& n, const std::vector<const HostArray*>& ops, const ConcreteShape& shape) {
  const HostArray& x = *ops[0];
  const HostArray* weights = ops.size() == 2 ? ops[1] : nullptr;
  if (x.rank() != 1 || shape.size() != 1 || (weights && weights->shape != x.shape))
    fail(n, "operands do not fit: x " + shape_str(x.shape));
  int64_t length = shape[0];
  HostArray out(n.dtype, shape);
  bool floats = weights && is_float(weights->dtype);
  std::vector<double> sums(floats ? length : 0, 0.0);
  std::vector<uint64_t> counts(floats ? 0 : length, 0);  // wrapping, as integer sums do
  for (int64_t i = 0; i < x.size(); ++i) {
    int64_t v = x.get_i64(i);
    if (v < 0 || v >= length) throw index_error(n.kind, v, length, 0, n.loc);
    if (floats) sums[v] += weights->get_f64(i);
    else counts[v] += weights ? static_cast<uint64_t>(weights->get_i64(i)) : 1;
  }
  for (int64_t b = 0; b < length; ++b) {
    if (floats) out.set_f64(b, sums[b]);
    else out.set_i64(b, static_cast<int64_t>(counts[b]));
  }
  return out;
}

// The edges in x's float type T (f32 for f32, else f64), as NumPy's linspace computes them.
std::vector<double> histogram_edges(const HistogramAttrs& h, int64_t bins, bool f32) {
  std::vector<double> edges(bins + 1);
  double step = (h.hi - h.lo) / static_cast<double>(bins);
  for (int64_t i = 0; i < bins; ++i) edges[i] = static_cast<double>(i) * step + h.lo;
  edges[bins] = h.hi;
  if (f32)
    for (double& e : edges) e = static_cast<float>(e);
  return edges;
}

HostArray eval_histogram(const Node& n, const HostArray& x, const ConcreteShape& shape) {
  if (shape.size() != 1 || shape[0] < 1) fail(n, "the result must have shape [B] with B >= 1");
  const HistogramAttrs& h = n.as<HistogramAttrs>();
  int64_t bins = shape[0];
  std::vector<double> edges = histogram_edges(h, bins, x.dtype == DType::F32);
  HostArray out(DType::I64, shape);
  int64_t* counts = out.as<int64_t>();
  for (int64_t i = 0; i < x.size(); ++i) {
    double v = is_float(x.dtype) ? x.get_f64(i) : static_cast<double>(x.get_i64(i));
    if (!(v >= edges[0] && v <= edges[bins])) continue;  // outside the range, or NaN
    // NumPy's float guess, then corrected against the edges until e[b] <= v < e[b+1].
    double guess = std::floor((v - h.lo) / (h.hi - h.lo) * static_cast<double>(bins));
    int64_t b = static_cast<int64_t>(std::clamp(guess, 0.0, static_cast<double>(bins - 1)));
    while (b > 0 && v < edges[b]) --b;
    while (b < bins - 1 && v >= edges[b + 1]) ++b;
    ++counts[b];
  }
  return out;
}

}  // namespace

HostArray evaluate_node(const Node& n, const std::vector<const HostArray*>& operands, const SymbolBindings& symbols) {
  if (n.kind == OpKind::Input)
    fail(n, "'" + n.as<InputAttrs>().name + "' has no operands: its value comes from the graph's inputs");
  size_t arity = n.kind == OpKind::Elementwise || n.kind == OpKind::Bincount ? n.inputs.size()
                 : n.kind == OpKind::Concatenate  ? n.inputs.size()
                 : n.kind == OpKind::Matmul || n.kind == OpKind::Take || n.kind == OpKind::TakeAlongAxis ? 2
                 : n.kind == OpKind::IndexAdd ? 3
                 : n.kind == OpKind::Histogram ? 1
                 : n.kind == OpKind::Reduce || n.kind == OpKind::Scan || is_view(n.kind) || n.kind == OpKind::Pad ? 1
                                                               : 0;
  if (n.inputs.size() != arity || operands.size() != arity)
    fail(n, "takes " + std::to_string(arity) + " operands but " + std::to_string(operands.size()) +
                " were given");
  for (const HostArray* op : operands) {
    if (!op) fail(n, "an operand has no value");
    if ((is_view(n.kind) || n.kind == OpKind::Pad || n.kind == OpKind::Concatenate) && op->dtype != n.dtype)
      fail(n, "operand is " + std::string(dtype_name(op->dtype)) + " but the node is " +
                  std::string(dtype_name(n.dtype)));
  }
  ConcreteShape shape;
  try {
    shape = evaluate(n.shape, symbols);
  } catch (const Error& e) {
    fail(n, e.message());
  }
  switch (n.kind) {
    case OpKind::Input: break;  // rejected above
    case OpKind::Constant: return n.as<ConstantAttrs>().value;
    case OpKind::Arange: {
      HostArray out(DType::I64, shape);
      for (int64_t i = 0; i < out.size(); ++i) out.as<int64_t>()[i] = i;
      return out;
    }
    case OpKind::Rand: return eval_rand(n.as<RandAttrs>().seed, shape);
    case OpKind::Elementwise: return eval_elementwise(n, operands, shape);
    case OpKind::Reduce: return eval_reduce(n, *operands[0], shape);
    case OpKind::Scan: return eval_scan(n, *operands[0], shape);
    case OpKind::Matmul: return eval_matmul(n, *operands[0], *operands[1], shape);
    case OpKind::BroadcastTo: return gather(*operands[0], shape, broadcast_strides(n, operands[0]->shape, shape));
    case OpKind::Permute: return eval_permute(n, *operands[0], shape);
    case OpKind::Reshape:
    case OpKind::ExpandDims:
    case OpKind::Squeeze: {
      HostArray out = *operands[0];
      if (num_elements(shape) != out.size())
        fail(n, "cannot give " + std::to_string(out.size()) + " elements the shape " + shape_str(shape));
      out.shape = shape;
      return out;
    }
    case OpKind::Slice: return eval_slice(n, *operands[0], shape, symbols);
    case OpKind::Pad: return eval_pad(n, *operands[0], shape, symbols);
    case OpKind::Concatenate: return eval_concatenate(n, operands, shape);
    // gather/scatter (issue 16)
    case OpKind::Take: return eval_take(n, *operands[0], *operands[1], shape);
    case OpKind::TakeAlongAxis: return eval_take_along_axis(n, *operands[0], *operands[1], shape);
    case OpKind::IndexAdd: return eval_index_add(n, *operands[0], *operands[1], *operands[2], shape);
    case OpKind::Bincount: return eval_bincount(n, operands, shape);
    case OpKind::Histogram: return eval_histogram(n, *operands[0], shape);
  }
  fail(n, "unknown op");
}

Error index_error(OpKind op, int64_t index, int64_t size, int axis, const SourceLoc& loc) {
  std::string name(op_kind_name(op));
  if (op == OpKind::Bincount)
    return Error(name + ": value " + std::to_string(index) + " is out of range for minlength " +
                     std::to_string(size) + " (values must be in [0, " + std::to_string(size) + "))", loc);
  return Error(name + ": index " + std::to_string(index) + " is out of range for axis " + std::to_string(axis) +
                   " of size " + std::to_string(size), loc);
}

SymbolBindings bind_inputs(const Graph& g, const TensorMap& inputs, const SymbolBindings& known) {
  SymbolBindings symbols = known;
  std::vector<NodeId> ids = g.input_nodes();
  for (NodeId id : ids) {
    const Node& n = g.node(id);
    std::string what = "input '" + n.as<InputAttrs>().name + "'";
    auto it = inputs.find(n.as<InputAttrs>().name);
    if (it == inputs.end())
      throw Error("missing " + what + " (" + std::string(dtype_name(n.dtype)) + shape_str(n.shape) + ")", n.loc);
    const HostArray& a = it->second;
    if (a.dtype != n.dtype)
      throw Error(what + " has dtype " + std::string(dtype_name(a.dtype)) + " but " +
                      std::string(dtype_name(n.dtype)) + " was declared", n.loc);
    bool valid = std::all_of(a.shape.begin(), a.shape.end(), [](int64_t d) { return d >= 0; });
    if (!valid || a.bytes.size() != static_cast<size_t>(a.size()) * dtype_size(a.dtype))
      throw Error(what + " holds " + std::to_string(a.bytes.size()) + " bytes, which do not fit its shape " +
                      shape_str(a.shape), n.loc);
    try {
      bind_symbols(n.shape, a.shape, symbols, what);
    } catch (const Error& e) {
      throw Error(e.message(), n.loc);
    }
  }
  // Compound dims (2*N) can only be checked once every input has bound its symbols.
  for (NodeId id : ids) {
    const Node& n = g.node(id);
    const ConcreteShape& actual = inputs.at(n.as<InputAttrs>().name).shape;
    std::string mismatch = "input '" + n.as<InputAttrs>().name + "' has shape " + shape_str(actual) + " but " +
                           shape_str(n.shape) + " was declared";
    try {
      if (evaluate(n.shape, symbols) != actual) throw Error(mismatch, n.loc);
    } catch (const Error& e) {
      if (e.loc().known()) throw;
      throw Error(mismatch + " (" + e.message() + ")", n.loc);
    }
  }
  for (const auto& [name, value] : inputs) {
    if (g.find_input(name)) continue;
    std::string declared;
    for (NodeId id : ids) declared += (declared.empty() ? "'" : ", '") + g.node(id).as<InputAttrs>().name + "'";
    throw Error("unexpected input '" + name + "': the graph's inputs are " + (declared.empty() ? "none" : declared));
  }
  return symbols;
}

std::vector<size_t> last_uses(const Graph& g) {
  size_t count = g.nodes.size();
  std::vector<size_t> last_use(count, 0);
  for (const GraphOutput& o : g.outputs) {
    if (o.node < 0 || static_cast<size_t>(o.node) >= count)
      throw Error("output '" + o.name + "' is not a node of the graph");
    last_use[o.node] = count;
  }
  for (size_t id = count; id-- > 0;) {
    if (last_use[id] == 0) continue;
    for (NodeId in : g.nodes[id].inputs) {
      if (in < 0 || static_cast<size_t>(in) >= id)
        throw Error("node " + std::to_string(id) + " reads node " + std::to_string(in) +
                    ", which does not precede it", g.nodes[id].loc);
      last_use[in] = std::max(last_use[in], id);
    }
  }
  return last_use;
}

TensorMap interpret(const Graph& g, const TensorMap& inputs, const SymbolBindings& known) {
  SymbolBindings symbols = bind_inputs(g, inputs, known);
  check_sizes(size_checks(g), symbols);  // np-views: index range checks before anything runs
  size_t count = g.nodes.size();
  std::vector<size_t> last_use = last_uses(g);
  std::vector<HostArray> owned(count);
  std::vector<const HostArray*> values(count, nullptr);
  for (size_t id = 0; id < count; ++id) {
    if (last_use[id] == 0) continue;
    const Node& n = g.nodes[id];
    if (n.kind == OpKind::Input) {
      values[id] = &inputs.at(n.as<InputAttrs>().name);
      continue;
    }
    std::vector<const HostArray*> operands;
    for (NodeId in : n.inputs) operands.push_back(values[in]);
    owned[id] = evaluate_node(n, operands, symbols);
    values[id] = &owned[id];
    for (NodeId in : n.inputs)
      if (last_use[in] == id) owned[in] = HostArray();
  }
  TensorMap out;
  for (const GraphOutput& o : g.outputs) out[o.name] = *values[o.node];
  return out;
}

}  // namespace fuse::ir
