// fuse._fuse: the C++ half of the Python package (docs/python.md). Thin bindings over the C++
// API (frontends/api.h, frontends/compile.h, passes/autodiff.h) plus the one thing that must be
// fast, the dispatch of a jitted call: Dispatcher keys a call by its arguments' dtypes, ranks and
// size-1/equal-size pattern, finds the compiled Program, and runs it on the NumPy arrays in place
// (runtime::Executable::run_views) with the GIL released. Tracing and everything else is Python
// (fuse/__init__.py).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "frontends/api.h"
#include "frontends/compile.h"
#include "frontends/expr/compile.h"
#include "frontends/render.h"
#include "ir/dot.h"
#include "ir/printer.h"
#include "passes/fusion.h"
#include "runtime/npy.h"

namespace py = pybind11;

namespace fuse::python {
namespace {

// ---- Errors: fuse::Error becomes TypeError (dtypes) or ValueError (everything else) ----

struct DTypeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

bool is_type_error(const std::string& message) {
  return message.find("dtype") != std::string::npos || message.find("not a float") != std::string::npos ||
         message.find("integer") != std::string::npos || message.find("bool") != std::string::npos ||
         message.find("float") != std::string::npos;
}

// ---- Graphs and traced tensors ----

/// A graph under construction; Python tensors share it, so it lives while any of them does.
struct PyGraph {
  std::shared_ptr<Graph> graph = std::make_shared<Graph>();
};

struct PyTensor {
  std::shared_ptr<Graph> graph;
  Tensor tensor;
};

ir::SourceLoc loc_of(const std::pair<std::string, int>& where) { return {where.first, where.second, 0}; }

DType dtype_from(const std::string& name) {
  static const std::map<std::string, DType> names = {
      {"bool", DType::Bool},   {"int32", DType::I32}, {"int64", DType::I64}, {"float32", DType::F32},
      {"float64", DType::F64}, {"i32", DType::I32},   {"i64", DType::I64},   {"f32", DType::F32},
      {"f64", DType::F64}};
  auto it = names.find(name);
  if (it == names.end())
    throw DTypeError("unsupported dtype '" + name + "': fuse takes bool, int32, int64, float32 and float64");
  return it->second;
}

std::string numpy_name(DType d) { return std::string(runtime::numpy_dtype_name(d)); }

/// A Python int as int64 (what weakly typed integer literals hold); TypeError past its range.
int64_t int64_of(const py::handle& value) {
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
  if (overflow) throw DTypeError("the Python int " + std::string(py::str(value)) + " does not fit in int64");
  if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
  return v;
}

/// A Python operand of an elementwise op: a traced tensor or a weakly typed scalar.
Operand operand_of(const py::handle& value, const ir::SourceLoc& loc, std::shared_ptr<Graph>& graph) {
  Operand op(0.0);
  if (py::isinstance<PyTensor>(value)) {
    const PyTensor& t = value.cast<const PyTensor&>();
    if (graph && graph != t.graph) throw ir::Error("operands come from different traced functions", loc);
    graph = t.graph;
    op = Operand(t.tensor);
  } else if (py::isinstance<py::bool_>(value)) {
    op = Operand(value.cast<bool>());
  } else if (py::isinstance<py::int_>(value)) {
    op = Operand(int64_of(value));
  } else if (py::isinstance<py::float_>(value)) {
    op = Operand(value.cast<double>());
  } else {
    throw DTypeError("unsupported operand of type " + std::string(py::str(value.get_type().attr("__name__"))) +
                     ": expected a traced value or a Python bool, int or float");
  }
  op.loc = loc;
  return op;
}

TensorArg tensor_arg(const PyTensor& t, const ir::SourceLoc& loc) {
  TensorArg a(t.tensor);
  a.loc = loc;
  return a;
}

Shape shape_from(const py::sequence& dims) {
  Shape shape;
  for (py::handle d : dims) {
    if (py::isinstance<py::str>(d)) shape.push_back(ir::parse_dim(d.cast<std::string>()));
    else shape.push_back(Dim(d.cast<int64_t>()));
  }
  return shape;
}

py::tuple shape_to_python(const Shape& shape) {
  py::tuple out(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    if (auto c = shape[i].constant()) out[i] = py::int_(*c);
    else out[i] = py::str(shape[i].str());
  }
  return out;
}

using Unary = Tensor (*)(Operand);
using Binary = Tensor (*)(Operand, Operand);

const std::map<std::string, Unary>& unary_ops() {
  static const std::map<std::string, Unary> ops = {
#define FUSE_NAMED_SCALAR_OP(Enum, name, arity, ...) FUSE_PY_UNARY_##arity(name)
#define FUSE_PY_UNARY_1(name) {#name, [](Operand x) { return fuse::name(x); }},
#define FUSE_PY_UNARY_2(name)
#include "ir/scalar_ops.def"
#undef FUSE_PY_UNARY_1
#undef FUSE_PY_UNARY_2
      {"negative", [](Operand x) { return apply(ir::ScalarOp::Neg, {x}); }},
      {"logical_not", [](Operand x) { return logical_not(x); }},
  };
  return ops;
}

const std::map<std::string, Binary>& binary_ops() {
  static const std::map<std::string, Binary> ops = {
#define FUSE_NAMED_SCALAR_OP(Enum, name, arity, ...) FUSE_PY_BINARY_##arity(name)
#define FUSE_PY_BINARY_1(name)
#define FUSE_PY_BINARY_2(name) {#name, [](Operand a, Operand b) { return fuse::name(a, b); }},
#include "ir/scalar_ops.def"
#undef FUSE_PY_BINARY_1
#undef FUSE_PY_BINARY_2
      {"add", [](Operand a, Operand b) { return a + b; }},
      {"subtract", [](Operand a, Operand b) { return a - b; }},
      {"multiply", [](Operand a, Operand b) { return a * b; }},
      {"divide", [](Operand a, Operand b) { return a / b; }},
      {"true_divide", [](Operand a, Operand b) { return a / b; }},
      {"floor_divide", [](Operand a, Operand b) { return floordiv(a, b); }},
      {"mod", [](Operand a, Operand b) { return a % b; }},
      {"remainder", [](Operand a, Operand b) { return a % b; }},
      {"power", [](Operand a, Operand b) { return fuse::pow(a, b); }},
      {"less", [](Operand a, Operand b) { return a < b; }},
      {"less_equal", [](Operand a, Operand b) { return a <= b; }},
      {"greater", [](Operand a, Operand b) { return a > b; }},
      {"greater_equal", [](Operand a, Operand b) { return a >= b; }},
      {"equal", [](Operand a, Operand b) { return equal(a, b); }},
      {"not_equal", [](Operand a, Operand b) { return not_equal(a, b); }},
      {"logical_and", [](Operand a, Operand b) { return logical_and(a, b); }},
      {"logical_or", [](Operand a, Operand b) { return logical_or(a, b); }},
  };
  return ops;
}

using Reduction = Tensor (*)(TensorArg, Axes, bool);
const std::map<std::string, Reduction>& reductions() {
  static const std::map<std::string, Reduction> ops = {
      {"sum", [](TensorArg x, Axes a, bool k) { return sum(x, a, k); }},
      {"prod", [](TensorArg x, Axes a, bool k) { return prod(x, a, k); }},
      {"max", [](TensorArg x, Axes a, bool k) { return max(x, a, k); }},
      {"min", [](TensorArg x, Axes a, bool k) { return min(x, a, k); }},
      {"mean", [](TensorArg x, Axes a, bool k) { return mean(x, a, k); }},
      {"any", [](TensorArg x, Axes a, bool k) { return any(x, a, k); }},
      {"all", [](TensorArg x, Axes a, bool k) { return all(x, a, k); }},
      {"argmax", [](TensorArg x, Axes a, bool k) { return argmax(x, a, k); }},
      {"argmin", [](TensorArg x, Axes a, bool k) { return argmin(x, a, k); }},
  };
  return ops;
}

PyTensor wrap(const std::shared_ptr<Graph>& g, Tensor t) { return PyTensor{g, t}; }

// ---- NumPy arrays in and out ----

std::optional<DType> numpy_dtype(const py::dtype& dt) {
  char kind = dt.kind();
  size_t size = dt.itemsize();
  if (kind == 'b' && size == 1) return DType::Bool;
  if (kind == 'i' && size == 4) return DType::I32;
  if (kind == 'i' && size == 8) return DType::I64;
  if (kind == 'f' && size == 4) return DType::F32;
  if (kind == 'f' && size == 8) return DType::F64;
  return std::nullopt;
}

py::dtype dtype_to_numpy(DType d) { return py::dtype(numpy_name(d)); }

/// An ndarray that fuse can read in place: C-contiguous, aligned, native byte order, one of
/// fuse's dtypes. Anything else array-like is converted (a copy); unsupported dtypes are a
/// TypeError naming them.
/// `what_of()` names the value in errors (made only then: this is on every call's path).
template <class What>
py::array as_fuse_array_named(const py::handle& value, const What& what_of) {
  py::array a;
  if (py::isinstance<py::array>(value)) {
    a = py::reinterpret_borrow<py::array>(value);
  } else if (py::hasattr(value, "__dlpack__")) {  // a PyTorch CPU tensor, ...: in place
    a = py::module_::import("numpy").attr("from_dlpack")(value);
  } else {
    a = py::module_::import("numpy").attr("asarray")(value);
  }
  if (!numpy_dtype(a.dtype()))
    throw DTypeError(what_of() + " has unsupported dtype " + std::string(py::str(a.dtype())) +
                     ": fuse takes bool, int32, int64, float32 and float64");
  constexpr int needed = py::array::c_style;
  char order = py::detail::array_descriptor_proxy(a.dtype().ptr())->byteorder;
  bool native = order == '=' || order == '|' || (order == '<') == (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__);
  bool aligned = (a.flags() & py::detail::npy_api::NPY_ARRAY_ALIGNED_) != 0;
  if (!(a.flags() & needed) || !aligned || !native) {
    py::object np = py::module_::import("numpy");
    a = np.attr("ascontiguousarray")(a, a.dtype().attr("newbyteorder")("="));
  }
  return a;
}

py::array as_fuse_array(const py::handle& value, const std::string& what) {
  return as_fuse_array_named(value, [&] { return what; });
}

/// The output array `h` as NumPy's: it owns h's memory (no copy).
py::array to_numpy(ir::HostArray&& h) {
  auto* owned = new ir::HostArray(std::move(h));
  py::capsule owner(owned, [](void* p) { delete static_cast<ir::HostArray*>(p); });
  std::vector<py::ssize_t> shape(owned->shape.begin(), owned->shape.end());
  return py::array(dtype_to_numpy(owned->dtype), shape, {}, owned->data(), owner);
}

ir::HostArray to_host_array(const py::array& a) {
  ir::HostArray h(*numpy_dtype(a.dtype()), ir::ConcreteShape(a.shape(), a.shape() + a.ndim()));
  if (!h.bytes.empty()) std::memcpy(h.data(), a.data(), h.bytes.size());
  return h;
}

// ---- Device arrays (Numba's device arrays): results stay on the GPU between calls ----

/// A tensor in CUDA device memory (a GPU's, or the simulated device's). Shared by the Python
/// objects that refer to it; calls read it in place and return new DeviceArrays.
struct DeviceArray {
  std::shared_ptr<runtime::DeviceBuffer> buffer;
  bool simulated = false;
  // The program whose run wrote it (queued on that program's stream), waited for before the
  // memory is handed to another library.
  std::shared_ptr<runtime::CudaExecutable> producer;

  void wait() const {
    if (!producer) return;
    py::gil_scoped_release release;
    producer->synchronize();
  }
};

// DLPack's ABI (dlpack.h v0.8), for DeviceArray.__dlpack__.
struct DLDevice {
  int32_t device_type;  // kDLCUDA = 2
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;  // kDLInt 0, kDLFloat 2, kDLBool 6
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor*);
};
struct DLPackExport {
  DLManagedTensor managed;
  std::shared_ptr<runtime::DeviceBuffer> buffer;  // kept alive until the consumer is done
  std::vector<int64_t> shape;
};

py::capsule to_dlpack(const DeviceArray& d) {
  if (d.simulated) throw py::buffer_error("a DeviceArray on the simulated device cannot be exported by DLPack");
  d.wait();
  auto* e = new DLPackExport;
  e->buffer = d.buffer;
  e->shape.assign(d.buffer->shape().begin(), d.buffer->shape().end());
  DType t = d.buffer->dtype();
  uint8_t code = t == DType::Bool ? 6 : (t == DType::F32 || t == DType::F64) ? 2 : 0;
  e->managed.dl_tensor = {reinterpret_cast<void*>(static_cast<uintptr_t>(d.buffer->data())),
                          {2, d.buffer->device()},
                          static_cast<int32_t>(e->shape.size()),
                          {code, static_cast<uint8_t>(ir::dtype_size(t) * 8), 1},
                          e->shape.data(),
                          nullptr,
                          0};
  e->managed.manager_ctx = e;
  e->managed.deleter = [](DLManagedTensor* m) { delete static_cast<DLPackExport*>(m->manager_ctx); };
  // A capsule the consumer has not renamed to "used_dltensor" still owns the tensor.
  return py::capsule(&e->managed, "dltensor", [](PyObject* capsule) {
    if (PyCapsule_IsValid(capsule, "dltensor")) {
      auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
      m->deleter(m);
    }
  });
}

py::array copy_to_host(const DeviceArray& d) {
  d.wait();
  ir::HostArray h;
  {
    py::gil_scoped_release release;
    h = d.buffer->to_host();
  }
  return to_numpy(std::move(h));
}

py::dict cuda_array_interface(const DeviceArray& d) {
  if (d.simulated)
    throw py::attribute_error("a DeviceArray on the simulated device has no __cuda_array_interface__: its memory "
                              "is not a GPU's");
  d.wait();
  py::dict out;
  py::tuple shape(d.buffer->shape().size());
  for (size_t i = 0; i < d.buffer->shape().size(); ++i) shape[i] = py::int_(d.buffer->shape()[i]);
  out["shape"] = shape;
  out["typestr"] = dtype_to_numpy(d.buffer->dtype()).attr("str");
  out["data"] = py::make_tuple(static_cast<uintptr_t>(d.buffer->data()), false);
  out["strides"] = py::none();
  out["version"] = 3;
  return out;
}

// ---- Compiled programs ----

Target target_from(const std::string& name) {
  if (name == "cpu") return Target::host();
  if (name == "cuda") return Target::cuda();
  if (name == "cuda-sim") return Target::cuda_sim();
  throw py::value_error("unknown target '" + name + "': expected \"cpu\", \"cuda\" or \"cuda-sim\"");
}

/// A graph compiled for one target, with its interface in order. The graph is kept for the
/// explanations (explain, ir, dot), which rerun the passes when asked.
struct Program {
  std::shared_ptr<const ir::Graph> graph;
  Target target;
  std::vector<std::string> input_names, output_names;
  std::shared_ptr<runtime::Executable> cpu;
  std::shared_ptr<runtime::CudaExecutable> cuda;

  // The compiled interface's order: per program input, the index of the graph input it is;
  // per graph output, the index of the program output holding it.
  std::vector<int> program_inputs, graph_outputs;

  /// Runs on `arrays` (in graph input order, checked by as_fuse_array); the outputs in graph
  /// output order.
  std::vector<ir::HostArray> run_arrays(const std::vector<py::array>& arrays) {
    std::vector<ir::HostArray> results;
    if (cpu) {
      std::vector<runtime::Executable::InputView> views;
      views.reserve(program_inputs.size());
      for (int i : program_inputs) {
        const py::array& a = arrays[i];
        views.push_back({*numpy_dtype(a.dtype()), reinterpret_cast<const int64_t*>(a.shape()),
                         static_cast<int>(a.ndim()), a.data()});
      }
      py::gil_scoped_release release;
      cpu->run_views(views, results);
    } else {
      ir::TensorMap inputs;
      for (size_t i = 0; i < arrays.size(); ++i) inputs[input_names[i]] = to_host_array(arrays[i]);
      ir::TensorMap named;
      {
        py::gil_scoped_release release;
        named = cuda->run_host(inputs);
      }
      for (const std::string& name : output_names) results.push_back(std::move(named.at(name)));
      return results;
    }
    bool in_order = graph_outputs.size() == results.size();
    for (size_t j = 0; in_order && j < graph_outputs.size(); ++j) in_order = graph_outputs[j] == static_cast<int>(j);
    if (in_order) return results;
    std::vector<ir::HostArray> ordered;
    for (int j : graph_outputs) ordered.push_back(results[j]);
    return ordered;
  }

  /// Runs a CUDA program on device arrays (in graph input order); the results stay there.
  std::vector<DeviceArray> run_device(std::vector<DeviceArray>& arrays) {
    if (!cuda) throw DTypeError("DeviceArray arguments need a CUDA target: @fuse.jit(target=\"cuda\" or \"cuda-sim\")");
    // The executable takes named buffers by value: lend ours for the run (under the GIL, which
    // other users of these DeviceArrays need too) and take them back.
    runtime::DeviceTensorMap inputs;
    for (size_t i = 0; i < arrays.size(); ++i) inputs[input_names[i]] = std::move(*arrays[i].buffer);
    runtime::DeviceTensorMap results;
    try {
      results = cuda->run(inputs);
    } catch (...) {
      for (size_t i = 0; i < arrays.size(); ++i) *arrays[i].buffer = std::move(inputs[input_names[i]]);
      throw;
    }
    for (size_t i = 0; i < arrays.size(); ++i) *arrays[i].buffer = std::move(inputs[input_names[i]]);
    std::vector<DeviceArray> out;
    for (const std::string& name : output_names)
      out.push_back({std::make_shared<runtime::DeviceBuffer>(std::move(results.at(name))), target.simulated, cuda});
    return out;
  }

  py::list run(const py::sequence& args) {
    if (static_cast<size_t>(py::len(args)) != input_names.size())
      throw py::type_error("expected " + std::to_string(input_names.size()) + " inputs, got " +
                           std::to_string(py::len(args)));
    std::vector<py::array> arrays;
    for (size_t i = 0; i < input_names.size(); ++i)
      arrays.push_back(as_fuse_array(args[i], "input '" + input_names[i] + "'"));
    py::list out;
    for (ir::HostArray& h : run_arrays(arrays)) out.append(to_numpy(std::move(h)));
    return out;
  }
};

std::shared_ptr<Program> compile_program(const ir::Graph& g, const std::string& target_name, bool fusion) {
  auto p = std::make_shared<Program>();
  p->graph = std::make_shared<const ir::Graph>(g);
  p->target = target_from(target_name);
  for (ir::NodeId id : g.input_nodes()) p->input_names.push_back(g.node(id).as<ir::InputAttrs>().name);
  for (const ir::GraphOutput& o : g.outputs) p->output_names.push_back(o.name);
  CompileOptions options;
  options.pipeline.fusion.enabled = fusion;
  py::gil_scoped_release release;
  if (p->target.kind == TargetKind::Cpu) p->cpu = std::make_shared<runtime::Executable>(compile(g, p->target, options));
  else p->cuda = compile_cuda(g, p->target, options);
  if (p->cpu) {
    const ir::Program& program = p->cpu->program();
    for (const ir::ProgramIO& in : program.inputs) {
      auto it = std::find(p->input_names.begin(), p->input_names.end(), in.name);
      p->program_inputs.push_back(static_cast<int>(it - p->input_names.begin()));
    }
    for (const std::string& name : p->output_names)
      for (size_t j = 0; j < program.outputs.size(); ++j)
        if (program.outputs[j].name == name) p->graph_outputs.push_back(static_cast<int>(j));
  }
  return p;
}

// ---- Dispatch of jitted calls ----

/// What selects a compiled specialization: per argument its kind (array dtype or Python scalar
/// type), its rank, and per dim 0 for size 1 or the index + 1 of the first dim (over every
/// argument) of the same size, so that broadcasting and equal sizes are traced as they are but a
/// new size that keeps the pattern reuses the code. Python scalars are traced as weakly typed
/// literals, so their value is part of the key.
struct Key {
  std::vector<int64_t> words;
  bool operator==(const Key&) const = default;
};
struct KeyHash {
  size_t operator()(const Key& k) const {
    size_t h = 1469598103934665603ull;
    for (int64_t w : k.words) h = (h ^ static_cast<size_t>(w)) * 1099511628211ull;
    return h;
  }
};

/// The jit call path: a function's specializations by Key. On a miss, the Python subclass's
/// `_trace(args)` traces, compiles and returns a Program (looked up on `self` at each miss, not
/// held, so that the function object is not kept alive by a cycle the GC cannot see).
class Dispatcher {
 public:
  py::object call(const py::object& self, const py::args& args) {
    std::vector<py::array> arrays;
    arrays.reserve(args.size());
    Key key;
    key.words.reserve(args.size() * 4);
    std::vector<int64_t> sizes;
    std::vector<DeviceArray> devices;
    // The rank, then per dim 0 for a 1, else 1 + the index of the first size seen equal to it.
    auto add_dims = [&](const int64_t* shape, size_t rank) {
      key.words.push_back(static_cast<int64_t>(rank));
      for (size_t d = 0; d < rank; ++d) {
        if (shape[d] == 1) {
          key.words.push_back(0);
          continue;
        }
        size_t first = 0;
        while (first < sizes.size() && sizes[first] != shape[d]) ++first;
        if (first == sizes.size()) sizes.push_back(shape[d]);
        key.words.push_back(static_cast<int64_t>(first) + 1);
      }
    };
    for (size_t i = 0; i < args.size(); ++i) {
      py::handle a = args[i];
      if (py::isinstance<py::bool_>(a)) {
        key.words.insert(key.words.end(), {-1, a.cast<bool>()});
      } else if (py::isinstance<py::int_>(a)) {
        key.words.insert(key.words.end(), {-2, int64_of(a)});
      } else if (py::isinstance<py::float_>(a)) {
        double v = a.cast<double>();
        int64_t bits;
        std::memcpy(&bits, &v, sizeof bits);
        key.words.insert(key.words.end(), {-3, bits});
      } else if (py::isinstance<DeviceArray>(a)) {
        DeviceArray d = a.cast<DeviceArray>();
        key.words.push_back(static_cast<int64_t>(d.buffer->dtype()) + 16);
        add_dims(d.buffer->shape().data(), d.buffer->shape().size());
        devices.push_back(std::move(d));
      } else {
        py::array arr = as_fuse_array_named(a, [i] { return "argument " + std::to_string(i); });
        key.words.push_back(static_cast<int64_t>(*numpy_dtype(arr.dtype())));
        add_dims(reinterpret_cast<const int64_t*>(arr.shape()), static_cast<size_t>(arr.ndim()));
        arrays.push_back(std::move(arr));
      }
    }
    std::shared_ptr<Program> program;
    {
      std::lock_guard lock(mutex_);
      auto it = cache_.find(key);
      if (it != cache_.end()) program = it->second;
    }
    if (!program) {
      py::object traced = self.attr("_trace")(args);
      program = traced.cast<std::shared_ptr<Program>>();
      std::lock_guard lock(mutex_);
      cache_.emplace(key, program);
      last_ = program;
    }
    if (!devices.empty()) {
      if (!arrays.empty())
        throw DTypeError("a call mixes DeviceArrays and host arrays: move them all with fuse.to_device");
      std::vector<DeviceArray> results = program->run_device(devices);
      if (results.size() == 1) return py::cast(results[0]);
      py::tuple out(results.size());
      for (size_t i = 0; i < results.size(); ++i) out[i] = py::cast(results[i]);
      return out;
    }
    std::vector<ir::HostArray> outputs = program->run_arrays(arrays);
    if (outputs.size() == 1) return to_numpy(std::move(outputs[0]));
    py::tuple out(outputs.size());
    for (size_t i = 0; i < outputs.size(); ++i) out[i] = to_numpy(std::move(outputs[i]));
    return out;
  }

  size_t size() const { return cache_.size(); }
  std::shared_ptr<Program> last() const { return last_; }

 private:
  std::mutex mutex_;
  std::unordered_map<Key, std::shared_ptr<Program>, KeyHash> cache_;
  std::shared_ptr<Program> last_;
};

// ---- Explanations ----

Compilation passes_of(const Program& p) {
  CompileOptions options;
  return run_passes(*p.graph, p.target, options);
}

std::string stage_text(const Program& p, const std::string& stage) {
  if (stage == "graph") return ir::print_graph(*p.graph);
  Compilation c = passes_of(p);
  for (Stage s : stages(p.target.kind))
    if (stage_name(s) == stage) {
      if (s == Stage::Object) break;
      return emit(c, s);
    }
  std::string names = "graph";
  for (Stage s : stages(p.target.kind))
    if (s != Stage::Object) names += ", " + std::string(stage_name(s));
  throw py::value_error("unknown stage '" + stage + "' for this target: expected one of " + names);
}

}  // namespace
}  // namespace fuse::python

PYBIND11_MODULE(_fuse, m) {
  using namespace fuse;
  using namespace fuse::python;
  m.doc() = "fuse's C++ half; use the fuse package";

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const DTypeError& e) {
      PyErr_SetString(PyExc_TypeError, e.what());
    } catch (const runtime::cuda::Unavailable& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    } catch (const ir::Error& e) {
      PyErr_SetString(is_type_error(e.message()) ? PyExc_TypeError : PyExc_ValueError, e.what());
    }
  });

  py::class_<PyTensor>(m, "Tensor")
      .def_property_readonly("dtype", [](const PyTensor& t) { return numpy_name(t.tensor.dtype()); })
      .def_property_readonly("shape", [](const PyTensor& t) { return shape_to_python(t.tensor.shape()); })
      .def_property_readonly("ndim", [](const PyTensor& t) { return t.tensor.rank(); });

  py::class_<PyGraph>(m, "Graph")
      .def(py::init<>())
      .def("input",
           [](PyGraph& g, const std::string& name, const std::string& dtype, const py::sequence& shape) {
             return wrap(g.graph, g.graph->input(name, dtype_from(dtype), shape_from(shape)));
           })
      .def("output", [](PyGraph& g, const std::string& name,
                        const PyTensor& t) { g.graph->output(name, TensorArg(t.tensor)); })
      .def("rand",
           [](PyGraph& g, const py::sequence& shape, uint64_t seed, std::pair<std::string, int> where) {
             Tensor t = g.graph->rand(shape_from(shape), seed);
             g.graph->ir().nodes[t.id()].loc = loc_of(where);
             return wrap(g.graph, t);
           })
      .def("arange", [](PyGraph& g, const py::object& n) {
        Dim d = py::isinstance<py::str>(n) ? ir::parse_dim(n.cast<std::string>()) : Dim(n.cast<int64_t>());
        return wrap(g.graph, g.graph->arange(d));
      })
      .def("compile", [](const PyGraph& g, const std::string& target, bool fusion) {
        return compile_program(g.graph->ir(), target, fusion);
      }, py::arg("target") = "cpu", py::arg("fusion") = true);

  m.def("unary", [](const std::string& op, const py::object& x, std::pair<std::string, int> where) {
    auto it = unary_ops().find(op);
    if (it == unary_ops().end()) throw py::value_error("unknown op " + op);
    std::shared_ptr<Graph> g;
    Operand a = operand_of(x, loc_of(where), g);
    if (!g) throw DTypeError(op + ": expected a traced value");
    return wrap(g, it->second(a));
  });
  m.def("binary", [](const std::string& op, const py::object& x, const py::object& y,
                     std::pair<std::string, int> where) {
    auto it = binary_ops().find(op);
    if (it == binary_ops().end()) throw py::value_error("unknown op " + op);
    std::shared_ptr<Graph> g;
    Operand a = operand_of(x, loc_of(where), g), b = operand_of(y, loc_of(where), g);
    return wrap(g, it->second(a, b));
  });
  m.def("where", [](const py::object& c, const py::object& x, const py::object& y, std::pair<std::string, int> where) {
    std::shared_ptr<Graph> g;
    Operand oc = operand_of(c, loc_of(where), g), a = operand_of(x, loc_of(where), g),
            b = operand_of(y, loc_of(where), g);
    return wrap(g, fuse::where(oc, a, b));
  });
  m.def("reduce", [](const std::string& kind, const PyTensor& x, const py::object& axis, bool keepdims,
                     std::pair<std::string, int> where) {
    Axes axes;
    if (py::isinstance<py::int_>(axis)) axes = Axes(axis.cast<int64_t>());
    else if (!axis.is_none()) axes = Axes(axis.cast<std::vector<int64_t>>());
    return wrap(x.graph, reductions().at(kind)(tensor_arg(x, loc_of(where)), axes, keepdims));
  });
  m.def("matmul", [](const PyTensor& a, const PyTensor& b, std::pair<std::string, int> where) {
    if (a.graph != b.graph) throw ir::Error("matmul: operands come from different traced functions", loc_of(where));
    return wrap(a.graph, fuse::matmul(tensor_arg(a, loc_of(where)), tensor_arg(b, loc_of(where))));
  });
  m.def("reshape", [](const PyTensor& x, const py::sequence& shape, std::pair<std::string, int> where) {
    Shape s;
    for (py::handle d : shape)
      s.push_back(py::isinstance<py::str>(d) ? ir::parse_dim(d.cast<std::string>())
                                            : Dim(d.cast<int64_t>() == -1 ? -1 : d.cast<int64_t>()));
    return wrap(x.graph, fuse::reshape(tensor_arg(x, loc_of(where)), s));
  });
  m.def("transpose", [](const PyTensor& x, const py::object& axes, std::pair<std::string, int> where) {
    if (axes.is_none()) return wrap(x.graph, fuse::transpose(tensor_arg(x, loc_of(where))));
    return wrap(x.graph, fuse::permute(tensor_arg(x, loc_of(where)), axes.cast<std::vector<int64_t>>()));
  });
  m.def("broadcast_to", [](const PyTensor& x, const py::sequence& shape, std::pair<std::string, int> where) {
    return wrap(x.graph, fuse::broadcast_to(tensor_arg(x, loc_of(where)), shape_from(shape)));
  });
  m.def("expand_dims", [](const PyTensor& x, int64_t axis, std::pair<std::string, int> where) {
    return wrap(x.graph, fuse::expand_dims(tensor_arg(x, loc_of(where)), axis));
  });
  m.def("squeeze", [](const PyTensor& x, const py::object& axis, std::pair<std::string, int> where) {
    Axes axes;
    if (py::isinstance<py::int_>(axis)) axes = Axes(axis.cast<int64_t>());
    else if (!axis.is_none()) axes = Axes(axis.cast<std::vector<int64_t>>());
    return wrap(x.graph, fuse::squeeze(tensor_arg(x, loc_of(where)), axes));
  });
  // ---- scans, clip, indexing, concatenate/stack/pad, gather/scatter (the IR's builders, so that
  // errors carry the Python caller's line) ----
  m.def("scan", [](const std::string& kind, const PyTensor& x, const py::object& axis, std::pair<std::string, int> where) {
    std::optional<int64_t> a;
    if (!axis.is_none()) a = axis.cast<int64_t>();
    TensorArg t = tensor_arg(x, loc_of(where));
    return wrap(x.graph, kind == "cumprod" ? fuse::cumprod(t, a) : fuse::cumsum(t, a));
  });
  m.def("clip", [](const py::object& x, const py::object& lo, const py::object& hi, std::pair<std::string, int> where) {
    std::shared_ptr<Graph> g;
    Operand a = operand_of(x, loc_of(where), g), l = operand_of(lo, loc_of(where), g), h = operand_of(hi, loc_of(where), g);
    if (!g) throw DTypeError("clip: expected a traced value");
    return wrap(g, fuse::clip(a, l, h));
  });
  // items: ("int", i) | ("slice", start, stop, step) with None for omitted bounds | ("none",) | ("ellipsis",)
  m.def("index", [](const PyTensor& x, const py::list& items, const std::string& text, std::pair<std::string, int> where) {
    std::vector<ir::IndexItem> list;
    for (py::handle h : items) {
      py::tuple t = h.cast<py::tuple>();
      std::string kind = t[0].cast<std::string>();
      ir::IndexItem item;
      if (kind == "int") {
        item.kind = ir::IndexItem::Kind::Integer;
        item.index = t[1].cast<int64_t>();
      } else if (kind == "slice") {
        item.kind = ir::IndexItem::Kind::Slice;
        if (!t[1].is_none()) item.start_int = t[1].cast<int64_t>();
        if (!t[2].is_none()) item.stop_int = t[2].cast<int64_t>();
        if (!t[3].is_none()) item.step = t[3].cast<int64_t>();
      } else {
        item.kind = kind == "none" ? ir::IndexItem::Kind::NewAxis : ir::IndexItem::Kind::Ellipsis;
      }
      list.push_back(item);
    }
    return wrap(x.graph, Tensor(x.graph.get(), ir::add_index(x.graph->ir(), x.tensor.id(), list, loc_of(where), text)));
  });
  m.def("concatenate", [](const std::string& kind, const std::vector<PyTensor>& xs, int64_t axis,
                          std::pair<std::string, int> where) {
    if (xs.empty()) throw ir::Error(kind + ": needs at least one array", loc_of(where));
    std::vector<ir::NodeId> ids;
    for (const PyTensor& t : xs) {
      if (t.graph != xs[0].graph) throw ir::Error(kind + ": operands come from different traced functions", loc_of(where));
      ids.push_back(t.tensor.id());
    }
    ir::Graph& g = xs[0].graph->ir();
    ir::NodeId id = kind == "stack" ? ir::add_stack(g, ids, axis, loc_of(where)) : ir::add_concatenate(g, ids, axis, loc_of(where));
    return wrap(xs[0].graph, Tensor(xs[0].graph.get(), id));
  });
  m.def("pad", [](const PyTensor& x, const std::vector<std::pair<int64_t, int64_t>>& widths, const std::string& mode,
                  double value, std::pair<std::string, int> where) {
    static const std::map<std::string, ir::PadMode> modes = {
        {"constant", ir::PadMode::Constant}, {"edge", ir::PadMode::Edge}, {"reflect", ir::PadMode::Reflect}};
    auto it = modes.find(mode);
    if (it == modes.end())
      throw ir::Error("pad: mode must be \"constant\", \"edge\" or \"reflect\", not \"" + mode + "\"", loc_of(where));
    std::vector<Dim> before, after;
    for (const auto& [b, a] : widths) {
      if (b < 0 || a < 0) throw ir::Error("pad: widths must be non-negative", loc_of(where));
      before.push_back(Dim(b));
      after.push_back(Dim(a));
    }
    return wrap(x.graph, Tensor(x.graph.get(), ir::add_pad(x.graph->ir(), x.tensor.id(), before, after, it->second, value,
                                                           loc_of(where))));
  });
  m.def("gather", [](const std::string& kind, const PyTensor& x, const PyTensor& idx, const py::object& values,
                     int64_t axis, std::pair<std::string, int> where) {
    if (x.graph != idx.graph) throw ir::Error(kind + ": operands come from different traced functions", loc_of(where));
    ir::Graph& g = x.graph->ir();
    ir::NodeId id;
    if (kind == "take") id = ir::add_take(g, x.tensor.id(), idx.tensor.id(), axis, loc_of(where));
    else if (kind == "take_along_axis") id = ir::add_take_along_axis(g, x.tensor.id(), idx.tensor.id(), axis, loc_of(where));
    else {
      const PyTensor& v = values.cast<const PyTensor&>();
      if (v.graph != x.graph) throw ir::Error(kind + ": operands come from different traced functions", loc_of(where));
      id = ir::add_index_add(g, x.tensor.id(), idx.tensor.id(), v.tensor.id(), axis, loc_of(where));
    }
    return wrap(x.graph, Tensor(x.graph.get(), id));
  });
  m.def("bincount", [](const PyTensor& x, int64_t length, const py::object& weights, std::pair<std::string, int> where) {
    ir::NodeId w = -1;
    if (!weights.is_none()) {
      const PyTensor& t = weights.cast<const PyTensor&>();
      if (t.graph != x.graph) throw ir::Error("bincount: operands come from different traced functions", loc_of(where));
      w = t.tensor.id();
    }
    return wrap(x.graph, Tensor(x.graph.get(), ir::add_bincount(x.graph->ir(), x.tensor.id(), Dim(length), w, loc_of(where))));
  });
  m.def("histogram", [](const PyTensor& x, int64_t bins, double lo, double hi, std::pair<std::string, int> where) {
    return wrap(x.graph, Tensor(x.graph.get(), ir::add_histogram(x.graph->ir(), x.tensor.id(), bins, lo, hi, loc_of(where))));
  });
  m.def("cast", [](const PyTensor& x, const std::string& dtype, std::pair<std::string, int> where) {
    return wrap(x.graph, fuse::cast(tensor_arg(x, loc_of(where)), dtype_from(dtype)));
  });
  m.def("vjp", [](const PyTensor& y, const std::vector<PyTensor>& wrt, std::pair<std::string, int> where) {
    std::vector<Tensor> xs;
    for (const PyTensor& x : wrt) xs.push_back(x.tensor);
    std::vector<PyTensor> out;
    for (Tensor t : fuse::vjp(tensor_arg(y, loc_of(where)), xs)) out.push_back(wrap(y.graph, t));
    return out;
  });

  py::class_<Program, std::shared_ptr<Program>>(m, "Program")
      .def_readonly("input_names", &Program::input_names)
      .def_readonly("output_names", &Program::output_names)
      .def("run", &Program::run)
      .def("stage", &stage_text)
      .def("explain", [](const Program& p) {
        Compilation c = passes_of(p);
        return passes::explain_fusion(c.result.graph, c.result.partition);
      })
      .def("dot", [](const Program& p, bool fused, const std::string& title) {
        if (!fused) return ir::graph_to_dot(*p.graph, title);
        return ir::program_to_dot(passes_of(p).result.program, title);
      })
      .def("time_cpp",
           [](Program& p, const py::sequence& args, int runs, bool reuse_outputs) {
             // Seconds per run of the same program through the C++ API (Executable::run on a
             // TensorMap: new outputs per run as a Python call makes, or the same ones reused),
             // for bench/python_dispatch.py's comparison.
             if (!p.cpu) throw py::value_error("time_cpp: cpu programs only");
             ir::TensorMap inputs, outputs;
             for (size_t i = 0; i < p.input_names.size(); ++i)
               inputs[p.input_names[i]] = to_host_array(as_fuse_array(args[i], p.input_names[i]));
             py::gil_scoped_release release;
             p.cpu->run(inputs, outputs);
             auto start = std::chrono::steady_clock::now();
             for (int r = 0; r < runs; ++r) {
               if (!reuse_outputs) outputs.clear();
               p.cpu->run(inputs, outputs);
             }
             std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
             return took.count() / runs;
           })
      .def("kernel_count", [](const Program& p) { return passes_of(p).result.program.kernels.size(); })
      .def_property_readonly("target", [](const Program& p) {
        return p.target.kind == TargetKind::Cpu ? "cpu" : p.target.simulated ? "cuda-sim" : "cuda";
      });

  py::class_<DeviceArray>(m, "DeviceArray")
      .def_property_readonly("shape",
                             [](const DeviceArray& d) {
                               py::tuple t(d.buffer->shape().size());
                               for (size_t i = 0; i < d.buffer->shape().size(); ++i) t[i] = d.buffer->shape()[i];
                               return t;
                             })
      .def_property_readonly("dtype", [](const DeviceArray& d) { return dtype_to_numpy(d.buffer->dtype()); })
      .def_property_readonly("simulated", [](const DeviceArray& d) { return d.simulated; })
      .def_property_readonly("__cuda_array_interface__", &cuda_array_interface)
      .def("copy_to_host", &copy_to_host)
      .def("__dlpack__", [](const DeviceArray& d, const py::object&) { return to_dlpack(d); },
           py::arg("stream") = py::none())
      .def("__dlpack_device__", [](const DeviceArray& d) { return py::make_tuple(2, d.buffer->device()); })
      .def("__repr__", [](const DeviceArray& d) {
        return "DeviceArray(" + d.buffer->str() + (d.simulated ? ", simulated)" : ")");
      });
  m.def("to_device", [](const py::object& value, bool simulated) {
    py::array a = as_fuse_array(value, "fuse.to_device's argument");
    ir::HostArray h = to_host_array(a);
    py::gil_scoped_release release;
    if (simulated) runtime::cuda::use_simulator();
    return DeviceArray{std::make_shared<runtime::DeviceBuffer>(runtime::DeviceBuffer::to_device(h, 0)), simulated,
                       nullptr};
  });

  py::class_<Dispatcher>(m, "Dispatcher")
      .def(py::init<>())
      .def("__call__", [](py::object self, const py::args& args) { return self.cast<Dispatcher&>().call(self, args); })
      .def_property_readonly("cache_size", &Dispatcher::size)
      .def_property_readonly("last", &Dispatcher::last);

  m.def("render", [](const std::string& dot, const std::string& format) {
    std::string bytes = render_dot(dot, format);
    return py::bytes(bytes);
  });
  // Where a call reads `value` from: its own memory when it is usable in place (for the tests).
  m.def("input_address", [](const py::object& value) {
    return reinterpret_cast<uintptr_t>(as_fuse_array(value, "value").data());
  });
  m.def("is_image_format", [](const std::string& format) { return is_image_format(format); });
  m.def("load_expr", [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      PyErr_SetFromErrnoWithFilename(PyExc_FileNotFoundError, path.c_str());
      throw py::error_already_set();
    }
    std::stringstream text;
    text << in.rdbuf();
    std::string source = text.str();
    expr::CompileResult r = expr::compile_expr(source, path);
    if (!r.graph) {
      std::string message = expr::format_diagnostics(r.errors, source);
      while (!message.empty() && message.back() == '\n') message.pop_back();
      throw py::value_error(message);
    }
    PyGraph g;
    g.graph->ir() = std::move(*r.graph);
    return g;
  });
  m.def("input_specs", [](const PyGraph& g) {
    py::list out;
    for (ir::NodeId id : g.graph->ir().input_nodes()) {
      const ir::Node& n = g.graph->ir().node(id);
      out.append(py::make_tuple(n.as<ir::InputAttrs>().name, numpy_name(n.dtype), shape_to_python(n.shape)));
    }
    return out;
  });
}
