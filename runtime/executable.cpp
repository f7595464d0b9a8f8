#include "runtime/executable.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string_view>

#include "ir/kernel_forms.h"
#include "runtime/thread_pool.h"

namespace fuse::runtime {

// The largest shared packed B: a larger one is packed per task rather than held twice.
constexpr int64_t kMaxSharedPanelBytes = int64_t{256} << 20;

// What one run needs besides its caller's arrays; grown on first use, then reused.
struct Executable::Workspace {
  std::vector<Buffer> slots;                   // one per memory-plan slot
  std::vector<std::vector<uint64_t>> scratch;  // per kernel: a split reduction's partials
  // A 2-D blocked matmul's split (ir::MatmulSplit) and packed B, shared by its tasks
  // (ir::SharedPackedB), kept for the next kernel and run (its pages fault once): one, as large
  // as the largest (kernels run one at a time).
  Buffer panels;
  std::vector<void*> pointers;                 // a kernel's buffer arguments
  std::vector<int64_t> symbol_sizes;
  std::array<int64_t, ir::kErrorRecordWords> error_record{};  // issue 16: zeroed before each run
};

namespace {

// np-scan: a scan in its chunked form (CpuKernelCode::scan_totals) when its rows are few and long
// enough and the pool has threads to share them; false (nothing run) otherwise, for `fn`'s row per
// iteration. The chunked form reads the input twice, so on one thread it only costs (~1.4x on a
// 10M-element cumsum). The chunks are fixed per row: every thread count above one computes the
// same bits; one thread's sequential folds differ from them in float rounding only.
bool run_chunked_scan(const ir::Kernel& k, const CpuKernelCode& code, std::vector<void*>& pointers,
                      const ir::SymbolBindings& symbols, const std::vector<int64_t>& symbol_sizes,
                      std::vector<uint64_t>& scratch, int64_t* error_record) {
  if (ThreadPool::global().num_threads() < 2) return false;
  int64_t rows = ir::evaluate(ir::parallel_iterations(k), symbols);
  if (rows < 1 || rows > code.scan_chunked_rows) return false;
  int64_t length = ir::evaluate(ir::num_elements(k.space), symbols) / rows;
  if (length < code.scan_chunked_length) return false;
  scratch.assign(static_cast<size_t>(code.scratch_bytes + 7) / 8, 0);  // no allocation after the first run
  pointers.push_back(scratch.data());
  if (error_record) pointers.push_back(error_record);  // last, after the scratch (ir/index_check.h)
  // Each task takes chunks worth at least ~64K elements.
  int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / (length / code.split_chunks));
  auto over_chunks = [&](CpuKernelFn fn) {
    ThreadPool::global().parallel_for(0, rows * code.split_chunks, grain, [&](int64_t begin, int64_t end) {
      fn(pointers.data(), symbol_sizes.data(), begin, end);
    });
  };
  over_chunks(code.scan_totals);
  code.finish(pointers.data(), symbol_sizes.data(), 0, rows);
  over_chunks(code.scan_chunks);
  return true;
}

// np-gaps: whether a kernel's body holds a take (whose indices it checks even with no work).
bool has_take(const ir::Kernel& k) {
  return std::any_of(k.body.nodes.begin(), k.body.nodes.end(), [](const ir::Node& n) { return n.kind == ir::OpKind::Take; });
}

}  // namespace

// Idle workspaces. A run takes the most recently returned one (its memory is likely still in
// cache) or makes a new one, so there are never more than the most runs ever in flight at once.
struct Executable::WorkspacePool {
  std::mutex mutex;
  std::vector<std::unique_ptr<Workspace>> idle;
  int made = 0;

  std::unique_ptr<Workspace> take(const ir::Program& p) {
    {
      std::lock_guard lock(mutex);
      if (!idle.empty()) {
        std::unique_ptr<Workspace> w = std::move(idle.back());
        idle.pop_back();
        return w;
      }
      ++made;
    }
    auto w = std::make_unique<Workspace>();
    w->slots.resize(p.num_slots);
    w->scratch.resize(p.kernels.size());
    return w;
  }
  void give_back(std::unique_ptr<Workspace> w) {
    std::lock_guard lock(mutex);
    idle.push_back(std::move(w));
  }
};

// The specializations of kernels over short symbolic lengths (CpuKernelCode::specialized_length). Runs
// look them up without a lock: an entry, once published, is never changed or freed before the
// Executable. Making one takes the mutex (a run that asks for an unmade one waits for it).
struct Executable::Specializations {
  struct Entry {
    std::vector<int64_t> key;  // per symbols[i]: its size, or -1 where not bound
    CpuCode code;              // no kernels: the generic code (the compile failed)
  };
  std::vector<size_t> kernels;       // those with a specialized_length
  std::vector<std::string> symbols;  // the symbols their lengths mention, sorted
  std::array<std::atomic<const Entry*>, kMaxSpecializations> published{};
  std::atomic<int> count{0};
  std::mutex mutex;
  std::vector<std::vector<int64_t>> seen_once;  // keys run once, with the generic code
  std::vector<std::unique_ptr<Entry>> owned;

  const Entry* find(const std::vector<int64_t>& key) const {
    int n = count.load(std::memory_order_acquire);
    for (int i = 0; i < n; ++i) {
      const Entry* e = published[static_cast<size_t>(i)].load(std::memory_order_acquire);
      if (e->key == key) return e;
    }
    return nullptr;
  }
};

namespace {

bool specializing_allowed() {
  const char* env = std::getenv("FUSE_SPECIALIZE");
  return !env || std::string_view(env) != "0";
}

}  // namespace

Executable::Executable(ir::Program program, CpuCode code)
    : program_(std::move(program)), code_(std::move(code)), workspaces_(std::make_unique<WorkspacePool>()) {
  if (code_.kernels.size() != program_.kernels.size())
    throw ir::Error("internal error: compiled code does not match the program's kernels");
  io_index_.assign(program_.buffers.size(), -1);
  for (size_t i = 0; i < program_.inputs.size(); ++i) io_index_[program_.inputs[i].buffer] = static_cast<int>(i);
  for (size_t i = program_.outputs.size(); i-- > 0;)
    if (program_.buffers[program_.outputs[i].buffer].role == ir::BufferRole::Output)
      io_index_[program_.outputs[i].buffer] = static_cast<int>(i);
  for (const ir::Kernel& k : program_.kernels) {
    for (ir::SizeCheck& c : ir::size_checks(k.body)) size_checks_.push_back(std::move(c));
    for (const ir::Node& n : k.body.nodes) may_raise_ = may_raise_ || ir::is_gather_scatter(n.kind);
  }
  index_checks_ = ir::index_checks(program_);
  for (size_t ki = 0; ki < program_.kernels.size(); ++ki)
    reports_errors_.push_back(code_.kernels[ki].fn && !ir::checked_nodes(program_.kernels[ki].body).empty());
  if (code_.specialize && specializing_allowed()) {
    auto s = std::make_unique<Specializations>();
    std::set<std::string> names;
    for (size_t ki = 0; ki < code_.kernels.size(); ++ki) {
      if (!code_.kernels[ki].fn || !code_.kernels[ki].specialized_length) continue;
      s->kernels.push_back(ki);
      for (const std::string& name : code_.kernels[ki].specialized_length->symbol_names()) names.insert(name);
    }
    s->symbols.assign(names.begin(), names.end());
    if (!s->kernels.empty()) specializations_ = std::move(s);
  }
}

int Executable::specialization_count() const {
  if (!specializations_) return 0;
  int made = 0;
  int n = specializations_->count.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i)
    made += !specializations_->published[static_cast<size_t>(i)].load(std::memory_order_acquire)->code.kernels.empty();
  return made;
}

const CpuCode* Executable::specialized_code(const ir::SymbolBindings& symbols) {
  if (!specializations_) return nullptr;
  Specializations& s = *specializations_;
  std::vector<int64_t> key(s.symbols.size(), -1);
  bool any = false;
  for (size_t ki : s.kernels) {
    const ir::Dim& row = *code_.kernels[ki].specialized_length;
    int64_t length = ir::evaluate(row, symbols);
    if (length <= 0 || length > code_.kernels[ki].specialized_up_to) continue;
    for (const std::string& name : row.symbol_names()) {
      size_t at = static_cast<size_t>(std::lower_bound(s.symbols.begin(), s.symbols.end(), name) - s.symbols.begin());
      key[at] = symbols.at(name);
      any = true;
    }
  }
  if (!any) return nullptr;
  auto usable = [](const Specializations::Entry* e) { return e->code.kernels.empty() ? nullptr : &e->code; };
  if (const Specializations::Entry* e = s.find(key)) return usable(e);
  std::lock_guard lock(s.mutex);
  if (const Specializations::Entry* e = s.find(key)) return usable(e);
  int n = s.count.load(std::memory_order_relaxed);
  if (n >= kMaxSpecializations) return nullptr;
  // The first run with these lengths takes the generic code: a length that runs once is not
  // worth a compile.
  auto seen = std::find(s.seen_once.begin(), s.seen_once.end(), key);
  if (seen == s.seen_once.end()) {
    if (s.seen_once.size() < 64) s.seen_once.push_back(key);
    return nullptr;
  }
  s.seen_once.erase(seen);
  auto entry = std::make_unique<Specializations::Entry>();
  entry->key = key;
  BoundSymbols bound;
  for (size_t i = 0; i < key.size(); ++i)
    if (key[i] >= 0) bound.emplace_back(s.symbols[i], key[i]);
  try {
    entry->code = code_.specialize(bound);
    // Kernels receive the symbols in the generic code's order: a module that orders them
    // otherwise (it never should) is not used.
    if (entry->code.kernels.size() != code_.kernels.size() || entry->code.symbols != code_.symbols) entry->code = {};
  } catch (const std::exception&) {
    entry->code = {};  // the generic code serves these lengths
  }
  const Specializations::Entry* made = entry.get();
  s.owned.push_back(std::move(entry));
  s.published[static_cast<size_t>(n)].store(made, std::memory_order_release);
  s.count.store(n + 1, std::memory_order_release);
  return usable(made);
}

Executable::~Executable() = default;
Executable::Executable(Executable&&) noexcept = default;
Executable& Executable::operator=(Executable&&) noexcept = default;

int Executable::workspace_count() const {
  std::lock_guard lock(workspaces_->mutex);
  return workspaces_->made;
}

int Executable::compiled_kernel_count() const {
  int n = 0;
  for (const CpuKernelCode& k : code_.kernels) n += k.fn != nullptr;
  return n;
}

// The memory of buffer `b` for this run: inputs in place, outputs in the returned arrays,
// intermediates in their slot (grown when a run needs more).
void* Executable::storage(ir::BufferId b, const ir::SymbolBindings& symbols,
                          const std::vector<ir::HostArray*>& outputs, const std::vector<const void*>& inputs,
                          Workspace& workspace) {
  const ir::Buffer& buf = program_.buffers[b];
  if (buf.role == ir::BufferRole::Input) return const_cast<void*>(inputs[io_index_[b]]);
  ir::ConcreteShape shape = ir::evaluate(buf.shape, symbols);
  switch (buf.role) {
    case ir::BufferRole::Input: break;
    case ir::BufferRole::Output: {
      ir::HostArray& out = *outputs[io_index_[b]];
      if (out.dtype != buf.dtype || out.shape != shape || out.bytes.empty() != (ir::num_elements(shape) == 0))
        out = ir::HostArray(buf.dtype, shape);
      return out.data();
    }
    case ir::BufferRole::Intermediate: {
      Buffer& slot = workspace.slots[buf.slot];
      size_t bytes = static_cast<size_t>(ir::num_elements(shape)) * ir::dtype_size(buf.dtype);
      if (slot.size_bytes() < bytes) slot = Buffer::empty(ir::DType::Bool, {static_cast<int64_t>(bytes)});
      return slot.data();
    }
  }
  return nullptr;
}

ir::TensorMap Executable::run(const ir::TensorMap& inputs) {
  ir::TensorMap outputs;
  run(inputs, outputs);
  return outputs;
}

void Executable::run(const ir::TensorMap& inputs, ir::TensorMap& caller_outputs) {
  // A program with gather/scatter ops can fail after some kernels ran (a bad data-dependent
  // index): it writes into a map of its own and hands the outputs over only when every kernel
  // succeeded, so that the error leaves the caller's arrays as they were. Other programs write
  // in place (no allocation after the first run).
  ir::TensorMap fresh;
  ir::TensorMap& outputs = may_raise_ ? fresh : caller_outputs;
  ir::SymbolBindings symbols = ir::bind_program_inputs(program_, inputs);
  std::vector<const void*> input_data;
  for (const ir::ProgramIO& in : program_.inputs) input_data.push_back(inputs.at(in.name).data());
  std::vector<ir::HostArray*> output_arrays;
  for (const ir::ProgramIO& o : program_.outputs) output_arrays.push_back(&outputs[o.name]);
  run_bound(symbols, input_data, output_arrays);
  if (may_raise_)
    for (auto& [name, value] : fresh) caller_outputs[name] = std::move(value);
}

void Executable::run_views(const std::vector<InputView>& inputs, std::vector<ir::HostArray>& outputs) {
  if (inputs.size() != program_.inputs.size())
    throw ir::Error("the program takes " + std::to_string(program_.inputs.size()) + " inputs, got " +
                    std::to_string(inputs.size()));
  ir::SymbolBindings symbols;
  std::vector<const void*> input_data;
  input_data.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ir::Buffer& buf = program_.buffers[program_.inputs[i].buffer];
    const InputView& view = inputs[i];
    std::string what = "input '" + program_.inputs[i].name + "'";
    if (view.dtype != buf.dtype)
      throw ir::Error(what + " has dtype " + std::string(ir::dtype_name(view.dtype)) + " but " +
                      std::string(ir::dtype_name(buf.dtype)) + " was declared");
    ir::ConcreteShape shape(view.shape, view.shape + view.rank);
    for (int64_t d : shape)
      if (d < 0) throw ir::Error(what + " has a negative dim: " + ir::shape_str(shape));
    ir::bind_symbols(buf.shape, shape, symbols, what);
    input_data.push_back(view.data);
  }
  // Compound dims (2*N) can only be checked once every input has bound its symbols.
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ir::Buffer& buf = program_.buffers[program_.inputs[i].buffer];
    ir::ConcreteShape shape(inputs[i].shape, inputs[i].shape + inputs[i].rank);
    if (ir::evaluate(buf.shape, symbols) != shape)
      throw ir::Error("input '" + program_.inputs[i].name + "' has shape " + ir::shape_str(shape) + " but " +
                      ir::shape_str(buf.shape) + " was declared");
  }
  ir::check_sizes(size_checks_, symbols);  // index range checks, before anything runs
  // As run(): a program that can fail midway computes into arrays of its own, handed over after.
  std::vector<ir::HostArray> fresh;
  std::vector<ir::HostArray>& targets = may_raise_ ? fresh : outputs;
  targets.resize(program_.outputs.size());
  // An output array that overlaps an input (the caller passed a view of it) is not written in
  // place: kernels read each input as it was (a transpose, a CPU loop that runs a block again),
  // so the output gets a new array and the old one lives until the run ends.
  std::vector<ir::HostArray> overlapped;
  for (ir::HostArray& o : targets) {
    const auto* first = reinterpret_cast<const std::byte*>(o.data());
    const std::byte* last = first + o.bytes.size();
    for (size_t i = 0; i < inputs.size() && !o.bytes.empty(); ++i) {
      ir::ConcreteShape shape(inputs[i].shape, inputs[i].shape + inputs[i].rank);
      const auto* in_first = static_cast<const std::byte*>(inputs[i].data);
      const std::byte* in_last = in_first + ir::num_elements(shape) * static_cast<int64_t>(ir::dtype_size(inputs[i].dtype));
      if (in_first < last && first < in_last) {
        overlapped.push_back(std::move(o));
        o = ir::HostArray();
      }
    }
  }
  std::vector<ir::HostArray*> output_arrays;
  for (ir::HostArray& o : targets) output_arrays.push_back(&o);
  run_bound(symbols, input_data, output_arrays);
  if (may_raise_) outputs = std::move(fresh);
}

void Executable::run_bound(const ir::SymbolBindings& symbols, const std::vector<const void*>& inputs,
                           const std::vector<ir::HostArray*>& outputs) {
  // Given back however the run ends: a kernel that throws leaves nothing a later run relies on.
  std::unique_ptr<Workspace> taken = workspaces_->take(program_);
  struct GiveBack {
    WorkspacePool& pool;
    std::unique_ptr<Workspace>& w;
    ~GiveBack() { pool.give_back(std::move(w)); }
  } give_back{*workspaces_, taken};
  Workspace& workspace = *taken;
  workspace.error_record.fill(0);
  std::vector<int64_t>& symbol_sizes = workspace.symbol_sizes;
  symbol_sizes.clear();
  for (const std::string& s : code_.symbols) {
    auto it = symbols.find(s);
    symbol_sizes.push_back(it == symbols.end() ? 0 : it->second);
  }
  const CpuCode* special = specialized_code(symbols);
  for (int ki : program_.launch_order) {
    const ir::Kernel& k = program_.kernels[ki];
    std::vector<void*>& pointers = workspace.pointers;
    pointers.clear();
    for (ir::BufferId b : k.inputs) pointers.push_back(storage(b, symbols, outputs, inputs, workspace));
    for (ir::BufferId b : k.outputs) pointers.push_back(storage(b, symbols, outputs, inputs, workspace));
    const CpuKernelCode& code = special && special->kernels[ki].fn ? special->kernels[ki] : code_.kernels[ki];
    launch(k, code, pointers, symbols, symbol_sizes, workspace, static_cast<size_t>(ki));
    // A compiled kernel that found a bad index said so in the record: stop before the next.
    if (reports_errors_[ki] && workspace.error_record[ir::kErrorCheck] != 0)
      throw ir::index_check_error(index_checks_, workspace.error_record[ir::kErrorCheck],
                                  workspace.error_record[ir::kErrorIndex], symbols);
  }
  // Outputs that name the same buffer as an earlier output.
  for (size_t i = 0; i < program_.outputs.size(); ++i) {
    int first = io_index_[program_.outputs[i].buffer];
    if (first >= 0 && first != static_cast<int>(i)) *outputs[i] = *outputs[first];
  }
}

void Executable::launch(const ir::Kernel& k, const CpuKernelCode& code, std::vector<void*>& pointers,
                        const ir::SymbolBindings& symbols, const std::vector<int64_t>& symbol_sizes,
                        Workspace& workspace, size_t kernel_index) {
  if (code.fn) {
    for (const ir::HostArray& c : code.constants) pointers.push_back(const_cast<void*>(c.data()));
    // The run's error record (ir/index_check.h) is the last pointer of a kernel with checks.
    int64_t* error_record = reports_errors_[kernel_index] ? workspace.error_record.data() : nullptr;
    if (code.scan_chunks &&
        run_chunked_scan(k, code, pointers, symbols, symbol_sizes, workspace.scratch[kernel_index], error_record))
      return;
    if (code.finish && k.schedule.form == ir::LoopForm::Scatter) {
      // histogram/bincount: ir::scatter_chunks(B) chunks, each counting into its own B bins of
      // the scratch; then the bins added up in chunk order (whatever the thread count).
      int64_t bins = ir::evaluate(ir::scatter_bins(k), symbols);
      int64_t chunks = ir::scatter_chunks(bins);
      std::vector<uint64_t>& scratch = workspace.scratch[kernel_index];
      scratch.resize(static_cast<size_t>(std::max<int64_t>(1, chunks * bins)));  // each chunk zeroes its bins
      pointers.push_back(scratch.data());
      if (error_record) pointers.push_back(error_record);
      int64_t elements = ir::evaluate(ir::num_elements(k.space), symbols);
      int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, elements / chunks));
      ThreadPool::global().parallel_for(0, chunks, grain, [&](int64_t begin, int64_t end) {
        code.fn(pointers.data(), symbol_sizes.data(), begin, end);
      });
      code.finish(pointers.data(), symbol_sizes.data(), 0, 1);
      return;
    }
    if (code.column_rows) {
      // A column reduction of few columns: ir::kColumnSplitChunks chunks of its rows, each
      // folding every column into its partials in the scratch, then the partials combined in
      // chunk order (whatever the thread count) over the columns.
      int64_t rows = ir::evaluate(ir::num_elements(ir::reduced_dims(k)), symbols);
      int64_t columns = ir::evaluate(ir::num_elements(ir::kept_dims(k)), symbols);
      if (ir::column_reduction_splits(k, rows, columns)) {
        std::vector<uint64_t>& scratch = workspace.scratch[kernel_index];
        scratch.resize(static_cast<size_t>(std::max<int64_t>(1, code.scratch_bytes / 8 * columns)));  // each chunk writes its own
        pointers.push_back(scratch.data());
        if (error_record) pointers.push_back(error_record);
        int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, rows * columns / code.split_chunks));
        ThreadPool::global().parallel_for(0, code.split_chunks, grain, [&](int64_t begin, int64_t end) {
          code.column_rows(pointers.data(), symbol_sizes.data(), begin, end);
        });
        code.finish(pointers.data(), symbol_sizes.data(), 0, columns);
        return;
      }
    }
    if (code.finish && !code.scan_chunks && !code.column_rows) {  // a split reduction
      std::vector<uint64_t>& scratch = workspace.scratch[kernel_index];
      scratch.assign(static_cast<size_t>(code.scratch_bytes + 7) / 8, 0);  // no allocation after the first run
      pointers.push_back(scratch.data());
      if (error_record) pointers.push_back(error_record);
      // Each task takes chunks worth at least ~64K elements: small reductions stay on one thread.
      int64_t elements = ir::evaluate(ir::num_elements(k.space), symbols);
      int64_t per_chunk = std::max<int64_t>(1, elements / code.split_chunks);
      int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / per_chunk);
      ThreadPool::global().parallel_for(0, code.split_chunks, grain, [&](int64_t begin, int64_t end) {
        code.fn(pointers.data(), symbol_sizes.data(), begin, end);
      });
      code.finish(pointers.data(), symbol_sizes.data(), 0, 1);
      return;
    }
    int64_t total = ir::evaluate(ir::parallel_iterations(k), symbols);
    ir::MatmulSplit split;  // rows split evenly, nothing shared, unless a 2-D matmul's says otherwise
    if (ir::shares_packed_b(k)) {
      // ir::MatmulSplit. A shared B is as large as B and cold in cache at each run, where a
      // task's own buffer of one block stays warm. On a 2-vCPU Zen 3 (bench/README.md): 6 x 2048
      // x 2048 and 48 x 2048 x 2048 (packing is most of the run) 10-20% slower shared on 2
      // threads; 1024^3 and the MLP shapes within noise on 2 threads, and 9-12% faster with 8
      // tasks (8 copies of B, not 1).
      const ir::Node& mm = k.body.node(ir::matmul_node(k));
      int64_t depth = ir::evaluate(k.body.node(mm.inputs[0]).shape.back(), symbols);
      int64_t columns = ir::evaluate(k.space.back(), symbols);
      split = ir::matmul_split(k, total, depth, columns, ThreadPool::global().num_threads(), kMaxSharedPanelBytes);
      int64_t bytes = ir::kMatmulSplitBytes;
      ir::SharedPackedB layout;
      if (split.shared) {
        layout = ir::shared_packed_b(k, depth, columns);
        bytes += layout.bytes;
      }
      Buffer& buffer = workspace.panels;
      if (static_cast<int64_t>(buffer.size_bytes()) < bytes) buffer = Buffer::empty(ir::DType::Bool, {bytes});
      auto* header = static_cast<int64_t*>(buffer.data());
      header[0] = split.column_tasks;
      header[1] = split.shared;
      if (split.shared)  // the claim flags
        std::memset(static_cast<char*>(buffer.data()) + ir::kMatmulSplitBytes, 0, static_cast<size_t>(layout.flags_bytes));
      pointers.push_back(buffer.data());
    }
    if (error_record) pointers.push_back(error_record);
    // np-gaps: with no work, a kernel with index checks still checks the indices of its empty
    // takes (the interpreter checks them all).
    if (total == 0 && error_record && has_take(k)) code.fn(pointers.data(), symbol_sizes.data(), 0, 0);
    auto body = [&](int64_t begin, int64_t end) { code.fn(pointers.data(), symbol_sizes.data(), begin, end); };
    if (split.row_unit > 0) {
      ThreadPool::global().parallel_for_guided(0, total, split.row_unit, split.max_row_units, body);
    } else if (split.column_tasks > 1) {
      // The grid: task u computes rows [r * total / R, (r + 1) * total / R) of column task
      // u / R (r = u % R), iterations c * total + row of the kernel's (ir::MatmulSplit).
      int64_t row_tasks = split.row_tasks;
      ThreadPool::global().parallel_for(0, split.column_tasks * row_tasks, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t u = lo; u < hi; ++u) {
          int64_t origin = u / row_tasks * total, r = u % row_tasks;
          int64_t first = r * total / row_tasks, last = (r + 1) * total / row_tasks;
          if (first < last) body(origin + first, origin + last);
        }
      });
    } else {
      ThreadPool::global().parallel_for(0, total, std::max<int64_t>(1, k.schedule.cpu.grain), body);
    }
    return;
  }
  // Not compiled: the reference interpreter computes the kernel from the same buffers.
  ir::TensorMap args;
  for (size_t i = 0; i < k.inputs.size(); ++i) {
    const ir::Buffer& buf = program_.buffers[k.inputs[i]];
    ir::HostArray a(buf.dtype, ir::evaluate(buf.shape, symbols));
    std::memcpy(a.data(), pointers[i], a.bytes.size());
    args[buf.name] = std::move(a);
  }
  ir::TensorMap results = ir::interpret(k.body, args, symbols);
  for (size_t o = 0; o < k.outputs.size(); ++o) {
    const ir::HostArray& r = results.at(program_.buffers[k.outputs[o]].name);
    std::memcpy(pointers[k.inputs.size() + o], r.data(), r.bytes.size());
  }
}

}  // namespace fuse::runtime
