#include "runtime/cuda_executable.h"

#include <algorithm>
#include <charconv>

#include "ir/error.h"

namespace fuse::runtime {

using cuda::check;
using cuda::CUdeviceptr;
using ir::Error;

CudaProgram make_cuda_program(const ir::Program& program, ir::CudaPlan plan, std::string ptx) {
  CudaProgram p{program.buffers, program.inputs, program.outputs, program.num_slots, std::move(plan), std::move(ptx), {},
                ir::index_checks(program)};
  for (const ir::Kernel& k : program.kernels) {
    std::vector<ir::SizeCheck> checks = ir::size_checks(k.body);
    p.size_checks.insert(p.size_checks.end(), checks.begin(), checks.end());
  }
  return p;
}

void validate(const CudaProgram& p, const std::string& what) {
  auto fail = [&](const std::string& why) { return Error(what + ": " + why); };
  const int num_buffers = static_cast<int>(p.buffers.size());
  for (const ir::Buffer& b : p.buffers) {
    if (b.role == ir::BufferRole::Intermediate && (b.slot < 0 || b.slot >= p.num_slots))
      throw fail("intermediate buffer '" + b.name + "' has slot " + std::to_string(b.slot) + " of " +
                 std::to_string(p.num_slots));
  }
  auto check_io = [&](const std::vector<ir::ProgramIO>& ios, const char* kind, ir::BufferRole role) {
    for (const ir::ProgramIO& io : ios) {
      if (io.buffer < 0 || io.buffer >= num_buffers)
        throw fail(std::string(kind) + " '" + io.name + "' names buffer " + std::to_string(io.buffer) + " of " +
                   std::to_string(num_buffers));
      ir::BufferRole actual = p.buffers[io.buffer].role;
      if (actual != role && !(role == ir::BufferRole::Output && actual == ir::BufferRole::Input))
        throw fail(std::string(kind) + " '" + io.name + "' names buffer '" + p.buffers[io.buffer].name + "', which is " +
                   std::string(ir::buffer_role_name(actual)));
    }
  };
  check_io(p.inputs, "input", ir::BufferRole::Input);
  check_io(p.outputs, "output", ir::BufferRole::Output);
  if (p.plan.launches.empty() && !p.outputs.empty())
    for (const ir::ProgramIO& o : p.outputs)
      if (p.buffers[o.buffer].role == ir::BufferRole::Output)
        throw fail("output '" + o.name + "' is written by no launch (the plan has none)");
  for (size_t i = 0; i < p.plan.scratch_bytes.size(); ++i)
    if (p.plan.scratch_bytes[i] < 0) throw fail("scratch " + std::to_string(i) + " has a negative size");
  if (p.plan.error_scratch >= static_cast<int>(p.plan.scratch_bytes.size()) ||
      (p.plan.error_scratch >= 0 && p.plan.scratch_bytes[p.plan.error_scratch] < ir::kErrorRecordWords * 8))
    throw fail("error_scratch " + std::to_string(p.plan.error_scratch) + " is not a scratch of " +
               std::to_string(ir::kErrorRecordWords * 8) + " bytes or more");
  if (p.plan.error_scratch < 0 && !p.index_checks.empty())
    throw fail("the program has index checks but no error_scratch");
  for (const ir::CudaLaunch& l : p.plan.launches) {
    std::string where = "launch '" + l.entry + "'";
    if (l.entry.empty()) throw fail("a launch has no entry name");
    for (int i = 0; i < 3; ++i) {
      if (l.block[i] < 1) throw fail(where + " has block size " + std::to_string(l.block[i]));
      if (l.work_per_block[i] < 1) throw fail(where + " has work_per_block " + std::to_string(l.work_per_block[i]));
      if (l.max_grid[i] < 1) throw fail(where + " has max_grid " + std::to_string(l.max_grid[i]));
    }
    if (l.shared_bytes < 0) throw fail(where + " has negative shared memory");
    for (const ir::CudaArg& a : l.args) {
      size_t count = 0;
      const char* kind = "";
      switch (a.kind) {
        case ir::CudaArg::Kind::Buffer: count = p.buffers.size(); kind = "buffer"; break;
        case ir::CudaArg::Kind::Constant: count = p.plan.constants.size(); kind = "constant"; break;
        case ir::CudaArg::Kind::Scratch: count = p.plan.scratch_bytes.size(); kind = "scratch"; break;
        case ir::CudaArg::Kind::Symbol: count = p.plan.symbols.size(); kind = "symbol"; break;
      }
      if (a.index < 0 || static_cast<size_t>(a.index) >= count)
        throw fail(where + " passes " + kind + " " + std::to_string(a.index) + " but there are " +
                   std::to_string(count));
    }
  }
}

ir::SymbolBindings bind_cuda_inputs(const CudaProgram& p, const std::map<std::string, TensorType>& inputs) {
  ir::SymbolBindings symbols;
  for (const ir::ProgramIO& in : p.inputs) {
    const ir::Buffer& b = p.buffers[in.buffer];
    std::string what = "input '" + in.name + "'";
    auto it = inputs.find(in.name);
    if (it == inputs.end())
      throw Error("missing " + what + " (" + std::string(ir::dtype_name(b.dtype)) + ir::shape_str(b.shape) + ")");
    if (it->second.dtype != b.dtype)
      throw Error(what + " has dtype " + std::string(ir::dtype_name(it->second.dtype)) + " but " +
                  std::string(ir::dtype_name(b.dtype)) + " was declared");
    ir::bind_symbols(b.shape, it->second.shape, symbols, what);
  }
  // Compound dims (2*N) can only be checked once every input has bound its symbols.
  for (const ir::ProgramIO& in : p.inputs) {
    const ir::Buffer& b = p.buffers[in.buffer];
    const ir::ConcreteShape& actual = inputs.at(in.name).shape;
    std::string mismatch =
        "input '" + in.name + "' has shape " + ir::shape_str(actual) + " but " + ir::shape_str(b.shape) + " was declared";
    ir::ConcreteShape expected;
    try {
      expected = ir::evaluate(b.shape, symbols);
    } catch (const Error&) {
      throw Error(mismatch);
    }
    if (expected != actual) throw Error(mismatch);
  }
  for (const auto& [name, type] : inputs) {
    bool known = std::any_of(p.inputs.begin(), p.inputs.end(), [&](const ir::ProgramIO& in) { return in.name == name; });
    if (!known) throw Error("'" + name + "' is not an input of the program");
  }
  ir::check_sizes(p.size_checks, symbols);  // np-views: before anything is launched
  return symbols;
}

int64_t grid_size(int64_t work, int64_t work_per_block, int64_t max_grid) {
  int64_t blocks = work <= 0 ? 0 : (work - 1) / work_per_block + 1;
  return std::clamp<int64_t>(blocks, 1, max_grid);
}

namespace {

/// The compute capability a PTX target needs ("sm_80" and "sm_90a" give 80 and 90); 0 when the
/// name is not of that form.
int sm_number(const std::string& sm) {
  int n = 0;
  if (sm.rfind("sm_", 0) != 0) return 0;
  std::from_chars(sm.data() + 3, sm.data() + sm.size(), n);
  return n;
}

/// The order of runs on one device: each run's stream waits for the end of the run queued before
/// it (by any CudaExecutable), so one executable's outputs can be another's inputs without a
/// synchronize, and a block the caching allocator hands out again is written only after the
/// kernels that used it. (Each executable has its own stream: without this, a second executable
/// could read the first one's outputs before they are written.)
struct RunOrder {
  std::mutex mutex;
  cuda::CUevent tail = nullptr;  // recorded at the end of the last run queued
  bool recorded = false;
};

RunOrder& run_order(int device) {
  static std::mutex mutex;
  static auto* orders = new std::map<int, RunOrder>;  // never destroyed: used by static destructors
  std::lock_guard lock(mutex);
  return (*orders)[device];
}

}  // namespace

CudaExecutable::CudaExecutable(CudaProgram program, int device) : program_(std::move(program)), device_(device) {
  validate(program_);
  const cuda::DriverApi& api = cuda::api(device_);
  cuda::DeviceInfo info = cuda::device_info(device_);
  int needed = sm_number(program_.plan.sm);
  if (needed > info.major * 10 + info.minor)
    throw Error("the PTX targets " + program_.plan.sm + " but cuda:" + std::to_string(device_) + " (" + info.name +
                ") is " + info.sm() + ": compile for --sm=" + std::to_string(info.major * 10 + info.minor));

  // The driver wants NUL-terminated PTX text.
  std::string image = program_.ptx;
  if (image.empty() || image.back() != '\0') image.push_back('\0');
  std::string log(16384, '\0');
  cuda::CUjit_option options[] = {cuda::CU_JIT_ERROR_LOG_BUFFER, cuda::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {log.data(), reinterpret_cast<void*>(static_cast<uintptr_t>(log.size()))};
  if (cuda::CUresult r = api.cuModuleLoadDataEx(&module_, image.data(), 2, options, values); r != cuda::CUDA_SUCCESS) {
    log.resize(log.find('\0'));
    while (!log.empty() && (log.back() == '\n' || log.back() == ' ')) log.pop_back();
    throw Error("cuModuleLoadDataEx failed: " + cuda::error_text(api, r) + " loading PTX for " + program_.plan.sm +
                " on " + info.name + (log.empty() ? std::string() : "; JIT log:\n" + log));
  }
  try {
    for (const ir::CudaLaunch& l : program_.plan.launches) {
      cuda::CUfunction f = nullptr;
      if (cuda::CUresult r = api.cuModuleGetFunction(&f, module_, l.entry.c_str()); r != cuda::CUDA_SUCCESS)
        throw Error("cuModuleGetFunction failed: " + cuda::error_text(api, r) + ": the PTX has no entry '" + l.entry +
                    "'");
      // More than 48 KiB of dynamic shared memory must be asked for.
      if (l.shared_bytes > 48 * 1024)
        check(api.cuFuncSetAttribute(f, cuda::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, l.shared_bytes),
              "cuFuncSetAttribute");
      functions_.push_back(f);
    }
    check(api.cuStreamCreate(&stream_, cuda::CU_STREAM_DEFAULT), "cuStreamCreate");
    check(api.cuEventCreate(&start_, cuda::CU_EVENT_DEFAULT), "cuEventCreate");
    check(api.cuEventCreate(&end_, cuda::CU_EVENT_DEFAULT), "cuEventCreate");
    for (const ir::HostArray& c : program_.plan.constants) constants_.push_back(DeviceBuffer::to_device(c, device_));
    for (int64_t bytes : program_.plan.scratch_bytes) {
      DeviceBuffer& s = scratch_.emplace_back(DeviceBuffer::empty(ir::DType::Bool, {bytes}, device_));
      if (bytes > 0)
        check(api.cuMemsetD8Async(s.data(), 0, static_cast<size_t>(bytes), stream_), "cuMemsetD8Async");
    }
    slots_.resize(program_.num_slots);
  } catch (...) {
    release_driver_objects();
    throw;
  }
}

CudaExecutable::~CudaExecutable() { release_driver_objects(); }

void CudaExecutable::release_driver_objects() noexcept {
  // Teardown errors (a device lost after a failed kernel) cannot be reported from a destructor.
  if (!module_) return;
  const cuda::DriverApi& api = cuda::driver().api;
  if (stream_) api.cuStreamSynchronize(stream_);
  if (start_) api.cuEventDestroy_v2(start_);
  if (end_) api.cuEventDestroy_v2(end_);
  if (stream_) api.cuStreamDestroy_v2(stream_);
  api.cuModuleUnload(module_);
  module_ = nullptr;
  stream_ = nullptr;
  start_ = end_ = nullptr;
}

CUdeviceptr CudaExecutable::output_storage(ir::BufferId b, const ir::SymbolBindings& symbols,
                                           DeviceTensorMap& outputs, const DeviceTensorMap& inputs,
                                           std::vector<DeviceBuffer>& retired) {
  const ir::Buffer& buf = program_.buffers[b];
  // The buffer carries the name of the first output that names it.
  const std::string* name = &buf.name;
  for (const ir::ProgramIO& o : program_.outputs)
    if (o.buffer == b) {
      name = &o.name;
      break;
    }
  ir::ConcreteShape shape = ir::evaluate(buf.shape, symbols);
  DeviceBuffer& out = outputs[*name];
  if (out.size_bytes() > 0) {
    for (const ir::ProgramIO& in : program_.inputs) {
      const DeviceBuffer& input = inputs.at(in.name);
      if (input.size_bytes() > 0 && out.data() < input.data() + input.size_bytes() &&
          input.data() < out.data() + out.size_bytes()) {
        retired.push_back(std::move(out));
        out = DeviceBuffer();
        break;
      }
    }
  }
  if (out.dtype() != buf.dtype || out.shape() != shape || out.device() != device_)
    out = DeviceBuffer::empty(buf.dtype, shape, device_);
  return out.data();
}

CUdeviceptr CudaExecutable::slot_storage(ir::BufferId b, const ir::SymbolBindings& symbols) {
  const ir::Buffer& buf = program_.buffers[b];
  int64_t bytes = ir::evaluate(buf.bytes(), symbols);
  DeviceBuffer& slot = slots_[buf.slot];
  if (static_cast<int64_t>(slot.size_bytes()) < bytes) {
    slot = DeviceBuffer();  // back to the cache first, so a grown slot may take its place
    slot = DeviceBuffer::empty(ir::DType::Bool, {bytes}, device_);
  }
  return slot.data();
}

DeviceTensorMap CudaExecutable::run(const DeviceTensorMap& inputs) {
  DeviceTensorMap outputs;
  run(inputs, outputs);
  return outputs;
}

void CudaExecutable::run(const DeviceTensorMap& inputs, DeviceTensorMap& caller_outputs) {
  std::lock_guard lock(run_mutex_);
  // issue 16: a bad index is found while the kernels run; the outputs go to the caller only after.
  const int error_scratch = program_.plan.error_scratch;
  DeviceTensorMap fresh;
  DeviceTensorMap& outputs = error_scratch >= 0 ? fresh : caller_outputs;
  std::map<std::string, TensorType> types;
  for (const auto& [name, buffer] : inputs) {
    if (buffer.device() != device_)
      throw Error("input '" + name + "' is " + buffer.str() + " but the program runs on cuda:" + std::to_string(device_));
    types[name] = {buffer.dtype(), buffer.shape()};
  }
  ir::SymbolBindings symbols = bind_cuda_inputs(program_, types);
  const cuda::DriverApi& api = cuda::api(device_);

  // Every buffer's device address for this run.
  std::vector<CUdeviceptr> address(program_.buffers.size(), 0);
  for (const ir::ProgramIO& in : program_.inputs) address[in.buffer] = inputs.at(in.name).data();
  // `inputs` and `outputs` may be one map: inputs replaced there stay alive here until the end.
  std::vector<DeviceBuffer> retired;
  for (size_t b = 0; b < program_.buffers.size(); ++b) {
    ir::BufferId id = static_cast<ir::BufferId>(b);
    if (program_.buffers[b].role == ir::BufferRole::Output)
      address[b] = output_storage(id, symbols, outputs, inputs, retired);
    if (program_.buffers[b].role == ir::BufferRole::Intermediate) address[b] = slot_storage(id, symbols);
  }
  std::vector<int64_t> symbol_sizes;
  for (const std::string& s : program_.plan.symbols) symbol_sizes.push_back(ir::evaluate(ir::Dim::symbol(s), symbols));

  RunOrder& order = run_order(device_);
  std::lock_guard order_lock(order.mutex);
  if (!order.tail) check(api.cuEventCreate(&order.tail, cuda::CU_EVENT_DEFAULT), "cuEventCreate");
  if (order.recorded) check(api.cuStreamWaitEvent(stream_, order.tail, 0), "cuStreamWaitEvent");
  check(api.cuEventRecord(start_, stream_), "cuEventRecord");
  if (error_scratch >= 0)
    check(api.cuMemsetD8Async(scratch_[error_scratch].data(), 0, ir::kErrorRecordWords * 8, stream_), "cuMemsetD8Async");
  std::vector<uint64_t> values;
  std::vector<void*> params;
  for (size_t li = 0; li < program_.plan.launches.size(); ++li) {
    const ir::CudaLaunch& l = program_.plan.launches[li];
    values.clear();
    for (const ir::CudaArg& a : l.args) {
      switch (a.kind) {
        case ir::CudaArg::Kind::Buffer: values.push_back(address[a.index]); break;
        case ir::CudaArg::Kind::Constant: values.push_back(constants_[a.index].data()); break;
        case ir::CudaArg::Kind::Scratch: values.push_back(scratch_[a.index].data()); break;
        case ir::CudaArg::Kind::Symbol: values.push_back(static_cast<uint64_t>(symbol_sizes[a.index])); break;
      }
    }
    params.clear();
    for (uint64_t& v : values) params.push_back(&v);
    unsigned grid[3];
    for (int i = 0; i < 3; ++i)
      grid[i] = static_cast<unsigned>(grid_size(ir::evaluate(l.work[i], symbols), l.work_per_block[i], l.max_grid[i]));
    cuda::CUresult r = api.cuLaunchKernel(functions_[li], grid[0], grid[1], grid[2], l.block[0], l.block[1], l.block[2],
                                          static_cast<unsigned>(l.shared_bytes), stream_, params.data(), nullptr);
    if (r != cuda::CUDA_SUCCESS)
      throw Error("cuLaunchKernel failed: " + cuda::error_text(api, r) + " launching '" + l.entry + "' with grid [" +
                  std::to_string(grid[0]) + ", " + std::to_string(grid[1]) + ", " + std::to_string(grid[2]) +
                  "], block [" + std::to_string(l.block[0]) + ", " + std::to_string(l.block[1]) + ", " +
                  std::to_string(l.block[2]) + "]");
  }
  check(api.cuEventRecord(end_, stream_), "cuEventRecord");
  check(api.cuEventRecord(order.tail, stream_), "cuEventRecord");
  order.recorded = true;
  ran_ = true;

  // Outputs that are not their buffer's first name, or that name an input, are copies. The
  // legacy stream copy_to uses is ordered after this stream's launches.
  for (const ir::ProgramIO& o : program_.outputs) {
    const ir::Buffer& buf = program_.buffers[o.buffer];
    const DeviceBuffer* source = nullptr;
    if (buf.role == ir::BufferRole::Input) {
      for (const ir::ProgramIO& in : program_.inputs)
        if (in.buffer == o.buffer) source = &inputs.at(in.name);
    } else {
      for (const ir::ProgramIO& first : program_.outputs)
        if (first.buffer == o.buffer) {
          if (first.name != o.name) source = &outputs.at(first.name);
          break;
        }
    }
    if (!source) continue;
    DeviceBuffer& out = outputs[o.name];
    if (out.dtype() != source->dtype() || out.shape() != source->shape() || out.device() != device_)
      out = DeviceBuffer::empty(source->dtype(), source->shape(), device_);
    source->copy_to(out);
  }
  // The replaced buffers go back to the cache only when no queued kernel reads them.
  if (!retired.empty()) check(api.cuStreamSynchronize(stream_), "cuStreamSynchronize");
  if (error_scratch >= 0) {
    int64_t record[ir::kErrorRecordWords] = {};
    check(api.cuMemcpyDtoHAsync_v2(record, scratch_[error_scratch].data(), sizeof record, stream_), "cuMemcpyDtoHAsync");
    check(api.cuStreamSynchronize(stream_), "cuStreamSynchronize");
    if (record[ir::kErrorCheck] != 0)
      throw ir::index_check_error(program_.index_checks, record[ir::kErrorCheck], record[ir::kErrorIndex], symbols);
    for (auto& [name, buffer] : fresh) caller_outputs[name] = std::move(buffer);
  }
}

ir::TensorMap CudaExecutable::run_host(const ir::TensorMap& inputs) {
  DeviceTensorMap device_inputs;
  for (const auto& [name, array] : inputs) device_inputs[name] = DeviceBuffer::to_device(array, device_);
  DeviceTensorMap device_outputs = run(device_inputs);
  ir::TensorMap outputs;
  for (const auto& [name, buffer] : device_outputs) outputs[name] = buffer.to_host();
  synchronize();  // the inputs are released to the cache below: nothing may still read them
  return outputs;
}

void CudaExecutable::synchronize() { check(cuda::api(device_).cuStreamSynchronize(stream_), "cuStreamSynchronize"); }

float CudaExecutable::last_run_ms() {
  std::lock_guard lock(run_mutex_);
  if (!ran_) throw Error("no run to time yet");
  const cuda::DriverApi& api = cuda::api(device_);
  check(api.cuEventSynchronize(end_), "cuEventSynchronize");
  float ms = 0;
  check(api.cuEventElapsedTime(&ms, start_, end_), "cuEventElapsedTime");
  return ms;
}

}  // namespace fuse::runtime
