// Runs a Program compiled for CUDA: PTX plus its launch plan (ir/cuda_plan.h), on one GPU.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "ir/cuda_plan.h"
#include "ir/index_check.h"
#include "ir/interpreter.h"
#include "ir/program.h"
#include "runtime/cuda_driver.h"
#include "runtime/device_buffer.h"

namespace fuse::runtime {

/// What running a Program on a GPU needs, and all an AOT bundle stores: the Program's buffers
/// (indexed by BufferId, as CudaArg::Buffer refers to them) and interface, the PTX, and the plan.
/// No kernel bodies: the PTX is the code.
struct CudaProgram {
  std::vector<ir::Buffer> buffers;
  std::vector<ir::ProgramIO> inputs;
  std::vector<ir::ProgramIO> outputs;
  int num_slots = 0;
  ir::CudaPlan plan;
  std::string ptx;  // text; a trailing NUL is optional
  std::vector<ir::SizeCheck> size_checks;  // np-views: index range checks, made before any launch
  /// issue 16: what each check of the error record (plan.error_scratch) reports (ir/index_check.h).
  std::vector<ir::IndexCheck> index_checks;
};

/// The parts of `program` a CudaProgram keeps, with what codegen::compile_cuda returned for it.
CudaProgram make_cuda_program(const ir::Program& program, ir::CudaPlan plan, std::string ptx);

/// Checks that the plan and interface are consistent (every argument, input and output names an
/// existing buffer, constant, scratch allocation or symbol; blocks and grid rules are positive;
/// intermediates have slots). Throws ir::Error saying what is wrong; `what` names the source
/// (e.g. "bundle 'dir'").
void validate(const CudaProgram& p, const std::string& what = "CUDA program");

/// The dtype and shape of a tensor, without its data.
struct TensorType {
  ir::DType dtype = ir::DType::F32;
  ir::ConcreteShape shape;
};

/// Checks tensors against the program's inputs (every input present, dtypes equal, shapes
/// matching the declared dims, no name that is not an input: a typo is not ignored) and binds the
/// shape symbols. Throws ir::Error naming the input.
/// Needs no GPU: fuse-run checks its .npy inputs with it before touching CUDA.
ir::SymbolBindings bind_cuda_inputs(const CudaProgram& p, const std::map<std::string, TensorType>& inputs);

/// Grid size along one axis: clamp(ceil(work / work_per_block), 1, max_grid).
int64_t grid_size(int64_t work, int64_t work_per_block, int64_t max_grid);

/// Loads the PTX once (cuModuleLoadDataEx; a JIT failure throws with the JIT's log), resolves the
/// entries, uploads the plan's constants and allocates its scratch (zero-filled once, when
/// allocated; kernels that need it zero at every run must leave it so). Each run binds symbols from
/// the inputs' shapes, places intermediates in per-slot allocations kept across runs, and
/// launches every kernel asynchronously on the executable's stream.
///
/// Thread safety: run(), run_host(), synchronize() and last_run_ms() may be called from any
/// number of threads at once. Runs on one CudaExecutable are queued one after another on its one
/// stream (a mutex guards the queueing, which takes microseconds; the GPU then executes them in
/// that order, sharing the intermediates safely). Runs of different CudaExecutables on one device
/// also execute in the order they were queued (each stream waits for an event at the end of the
/// previous run), so outputs of one can be inputs of another without synchronize(). last_run_ms()
/// times whichever run was queued last.
class CudaExecutable {
 public:
  explicit CudaExecutable(CudaProgram program, int device = 0);
  ~CudaExecutable();
  CudaExecutable(const CudaExecutable&) = delete;
  CudaExecutable& operator=(const CudaExecutable&) = delete;

  /// Launches the program on device inputs and returns its outputs, still on the device; the
  /// work is queued, not finished (to_host() or synchronize() waits).
  DeviceTensorMap run(const DeviceTensorMap& inputs);
  /// The same, writing into `outputs`: buffers already there with the right dtype, shape and
  /// device are reused (like Numba's out=), others are (re)allocated. A program with index
  /// checks (take, ...) computes into fresh buffers, waits for the run, reads its error record
  /// and moves them into `outputs` only when no index was bad (else it throws the interpreter's
  /// error and `outputs` stays as it was).
  void run(const DeviceTensorMap& inputs, DeviceTensorMap& outputs);
  /// Host convenience: uploads the inputs, runs, waits and downloads the outputs.
  ir::TensorMap run_host(const ir::TensorMap& inputs);

  /// Waits for all work queued on the stream.
  void synchronize();
  /// Milliseconds between the start of the last run's first launch and the end of its last one,
  /// measured with events on the stream (waits for the run to finish).
  float last_run_ms();

  const CudaProgram& program() const { return program_; }
  int device() const { return device_; }
  cuda::CUstream stream() const { return stream_; }

 private:
  /// `retired` receives a preallocated output whose memory is also an input's (`run(state,
  /// state)`): kernels such as transposes would overwrite what other threads still read, so the
  /// output gets new memory and the old buffer is released once the run has finished.
  cuda::CUdeviceptr output_storage(ir::BufferId b, const ir::SymbolBindings& symbols, DeviceTensorMap& outputs,
                                   const DeviceTensorMap& inputs, std::vector<DeviceBuffer>& retired);
  cuda::CUdeviceptr slot_storage(ir::BufferId b, const ir::SymbolBindings& symbols);
  void release_driver_objects() noexcept;

  CudaProgram program_;
  int device_;
  cuda::CUmodule module_ = nullptr;
  std::vector<cuda::CUfunction> functions_;  // per launch
  std::vector<DeviceBuffer> constants_;      // as plan.constants
  std::vector<DeviceBuffer> scratch_;        // as plan.scratch_bytes
  std::vector<DeviceBuffer> slots_;          // per memory-plan slot, raw bytes (grown when needed)
  cuda::CUstream stream_ = nullptr;
  cuda::CUevent start_ = nullptr, end_ = nullptr;
  bool ran_ = false;
  std::mutex run_mutex_;  // one run queued at a time: slots_, scratch_, the events
};

}  // namespace fuse::runtime
