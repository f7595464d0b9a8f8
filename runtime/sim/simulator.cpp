#include "runtime/sim/simulator.h"

#include <boost/context/fiber.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "ir/cuda_sim_abi.h"

namespace fuse::runtime::sim {

namespace abi = ir::cuda_sim;
namespace ctx = boost::context;

Options options_from_environment() {
  Options o;
  if (const char* checks = std::getenv("FUSE_CUDA_SIM_CHECKS"); checks && *checks) {
    std::string text = checks;
    if (text == "all") {
    } else if (text == "none") {
      o.sync = o.race = o.memcheck = false;
    } else {
      o.sync = o.race = o.memcheck = false;
      std::stringstream list(text);
      std::string item;
      while (std::getline(list, item, ',')) {
        if (item == "sync") o.sync = true;
        else if (item == "race") o.race = true;
        else if (item == "memcheck") o.memcheck = true;
        else
          throw std::runtime_error("FUSE_CUDA_SIM_CHECKS: unknown check '" + item +
                                   "' (all, none, or a comma list of sync, race, memcheck)");
      }
    }
  }
  if (const char* seed = std::getenv("FUSE_CUDA_SIM_SEED"); seed && *seed) o.seed = std::strtoull(seed, nullptr, 10);
  unsigned cores = std::max(1u, std::min(8u, std::thread::hardware_concurrency()));
  o.workers = static_cast<int>(cores);
  if (const char* n = std::getenv("FUSE_CUDA_SIM_THREADS"); n && *n) o.workers = std::max(1, std::atoi(n));
  return o;
}

// ---- device memory ----

namespace {
constexpr uint64_t kAllocationAlignment = 256;  // as cuMemAlloc's
constexpr uint64_t kQuarantineBytes = 256ull << 20;
uint64_t round_up(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }
/// Each allocation is followed by a red zone of this many bytes that belongs to no allocation, so
/// that an access just past the end is reported against it (not taken for the next allocation).
constexpr uint64_t kRedZone = 256;
uint64_t reserved_bytes(uint64_t size) { return round_up(std::max<uint64_t>(size, 1), kAllocationAlignment) + kRedZone; }
}  // namespace

void* Memory::allocate(uint64_t bytes) {
  void* p = std::aligned_alloc(kAllocationAlignment, reserved_bytes(bytes));
  if (!p) return nullptr;
  std::lock_guard lock(mutex_);
  table_[reinterpret_cast<uintptr_t>(p)] = {reinterpret_cast<uintptr_t>(p), bytes, true};
  return p;
}

bool Memory::free(void* p) {
  std::lock_guard lock(mutex_);
  auto it = table_.find(reinterpret_cast<uintptr_t>(p));
  if (it == table_.end() || !it->second.live) return false;
  it->second.live = false;
  quarantine_.push_back(it->first);
  quarantined_bytes_ += it->second.size;
  while (quarantined_bytes_ > kQuarantineBytes && !quarantine_.empty()) {
    auto old = table_.find(quarantine_.front());
    quarantine_.erase(quarantine_.begin());
    quarantined_bytes_ -= old->second.size;
    std::free(reinterpret_cast<void*>(old->first));
    table_.erase(old);
  }
  return true;
}

std::vector<Memory::Allocation> Memory::snapshot() {
  std::lock_guard lock(mutex_);
  std::vector<Allocation> all;
  all.reserve(table_.size());
  for (const auto& [base, a] : table_) all.push_back(a);
  return all;
}

bool Memory::valid(uintptr_t p, uint64_t bytes) {
  std::lock_guard lock(mutex_);
  auto it = table_.upper_bound(p);
  if (it == table_.begin()) return false;
  --it;
  return it->second.live && p >= it->first && p + bytes <= it->first + it->second.size;
}

// ---- execution ----

namespace {

constexpr size_t kStackBytes = 64 * 1024;
constexpr uint64_t kSharedSlack = 4096;  // past the arena's end: still recognized as shared (out of bounds)

std::atomic<long long> g_threads{0};
std::atomic<long long> g_nanoseconds{0};

/// Fiber stacks, reused by the blocks a host thread runs.
struct StackPool {
  std::vector<void*> stacks;
  ~StackPool() {
    for (void* s : stacks) std::free(s);
  }
};
thread_local StackPool t_stacks;

struct PooledStack {
  ctx::stack_context allocate() {
    void* base = nullptr;
    if (t_stacks.stacks.empty()) {
      base = std::aligned_alloc(64, kStackBytes);
      if (!base) throw std::bad_alloc();
    } else {
      base = t_stacks.stacks.back();
      t_stacks.stacks.pop_back();
    }
    ctx::stack_context sc;
    sc.size = kStackBytes;
    sc.sp = static_cast<char*>(base) + kStackBytes;
    return sc;
  }
  void deallocate(ctx::stack_context& sc) noexcept {
    t_stacks.stacks.push_back(static_cast<char*>(sc.sp) - sc.size);
  }
};

enum class State : uint8_t { Runnable, Barrier, Shuffle, Exited };

struct SimThread {
  ctx::fiber fiber;
  unsigned tid[3] = {0, 0, 0};
  int linear = 0;
  State state = State::Runnable;
  const char* site = nullptr;
  int32_t mode = 0;
  uint32_t mask = 0, value = 0, b = 0, c = 0;
  uint64_t result = 0;
};

/// What every block of one launch shares.
struct Launch {
  const Kernel* kernel = nullptr;
  LaunchConfig config{};
  void** params = nullptr;
  Options options;
  std::vector<Memory::Allocation> allocations;
  uint64_t shared_bytes = 0;
  std::vector<uint32_t> order;  // block indices, shuffled
  std::atomic<size_t> next{0};
  std::mutex report_mutex;
  std::string first_report;
  long long reports = 0;

  void report(const std::string& text) {
    std::lock_guard lock(report_mutex);
    if (reports++ == 0) first_report = text;
  }
};

/// Per shared byte: the barrier epoch of the last write and read, and by whom.
struct ByteShadow {
  uint32_t write_epoch = 0, read_epoch = 0;
  int16_t writer = -1, reader = -1;
  bool many_readers = false;
};

std::string triple(const unsigned v[3]) {
  return "(" + std::to_string(v[0]) + ", " + std::to_string(v[1]) + ", " + std::to_string(v[2]) + ")";
}

std::string hex(uint64_t v) {
  std::ostringstream s;
  s << "0x" << std::hex << v;
  return s.str();
}

/// Runs the blocks one host thread takes; one fiber per CUDA thread of the current block.
class BlockRunner {
 public:
  explicit BlockRunner(Launch& launch) : launch_(launch) {
    arena_capacity_ = round_up(launch.shared_bytes + kSharedSlack, 256);
    arena_ = static_cast<uint8_t*>(std::aligned_alloc(256, arena_capacity_));
    if (!arena_) throw std::bad_alloc();
    shadow_.resize(launch.shared_bytes);
    const LaunchConfig& c = launch.config;
    threads_.resize(static_cast<size_t>(c.block[0]) * c.block[1] * c.block[2]);
  }
  ~BlockRunner() { std::free(arena_); }
  BlockRunner(const BlockRunner&) = delete;
  BlockRunner& operator=(const BlockRunner&) = delete;

  void run_all();

  // The simulator functions kernels call (on the current thread's fiber).
  int32_t special_register(int32_t which) const;
  void barrier(const char* site);
  uint64_t shuffle(int32_t mode, uint32_t mask, uint32_t value, uint32_t b, uint32_t c, const char* site);
  void* access(void* p, uint64_t bytes, uint32_t flags, uint64_t align, const char* site);
  void* shared_base() const { return arena_; }

 private:
  void run_block(uint32_t index);
  bool resolve_shuffles();
  bool release_barrier();
  void break_deadlock();
  void yield() { scheduler_ = std::move(scheduler_).resume(); }
  std::string where(const SimThread& t) const { return "block " + triple(ctaid_) + " thread " + triple(t.tid); }
  void report(const std::string& kind, const char* site, const SimThread& t, const std::string& detail) {
    launch_.report(kind + " at " + std::string(site) + ": " + where(t) + ": " + detail);
  }
  void* shared_access(SimThread& t, uint64_t offset, uint64_t bytes, uint32_t flags, uint64_t align, const char* site);
  void* global_access(SimThread& t, uintptr_t a, uint64_t bytes, uint32_t flags, uint64_t align, const char* site);

  Launch& launch_;
  unsigned ctaid_[3] = {0, 0, 0};
  std::vector<SimThread> threads_;
  SimThread* current_ = nullptr;
  ctx::fiber scheduler_;
  uint8_t* arena_ = nullptr;
  uint64_t arena_capacity_ = 0;
  std::vector<ByteShadow> shadow_;
  uint32_t epoch_ = 0, block_start_epoch_ = 0;
  bool degraded_ = false;  // after a sync error: barriers and shuffles no longer wait
  size_t last_allocation_ = 0;
  alignas(64) uint8_t scratch_[4096];
};

thread_local BlockRunner* t_runner = nullptr;

void BlockRunner::run_all() {
  t_runner = this;
  for (size_t i; (i = launch_.next.fetch_add(1)) < launch_.order.size();) run_block(launch_.order[i]);
  t_runner = nullptr;
}

void BlockRunner::run_block(uint32_t index) {
  const LaunchConfig& c = launch_.config;
  ctaid_[0] = index % c.grid[0];
  ctaid_[1] = (index / c.grid[0]) % c.grid[1];
  ctaid_[2] = index / (c.grid[0] * c.grid[1]);
  std::memset(arena_, 0xff, arena_capacity_);  // poison: uninitialized shared memory reads as NaN
  block_start_epoch_ = epoch_ = epoch_ + 1;
  degraded_ = false;
  const int n = static_cast<int>(threads_.size());
  for (int i = 0; i < n; ++i) {
    SimThread& t = threads_[i];
    t.linear = i;
    t.tid[0] = i % c.block[0];
    t.tid[1] = (i / c.block[0]) % c.block[1];
    t.tid[2] = i / (c.block[0] * c.block[1]);
    t.state = State::Runnable;
    t.fiber = ctx::fiber(std::allocator_arg, PooledStack(), [this, &t](ctx::fiber&& scheduler) {
      scheduler_ = std::move(scheduler);
      launch_.kernel->entry(launch_.params);
      t.state = State::Exited;
      return std::move(scheduler_);
    });
  }
  int live = n;
  while (true) {
    for (SimThread& t : threads_) {
      if (t.state != State::Runnable) continue;
      current_ = &t;
      t.fiber = std::move(t.fiber).resume();
      if (t.state == State::Exited) --live;
    }
    current_ = nullptr;
    if (live == 0) break;
    if (resolve_shuffles()) continue;
    if (release_barrier()) continue;
    break_deadlock();
  }
  g_threads += n;
}

int32_t BlockRunner::special_register(int32_t which) const {
  const SimThread& t = *current_;
  const LaunchConfig& c = launch_.config;
  switch (which) {
    case abi::kTidX: return static_cast<int32_t>(t.tid[0]);
    case abi::kTidY: return static_cast<int32_t>(t.tid[1]);
    case abi::kTidZ: return static_cast<int32_t>(t.tid[2]);
    case abi::kNtidX: return static_cast<int32_t>(c.block[0]);
    case abi::kNtidY: return static_cast<int32_t>(c.block[1]);
    case abi::kNtidZ: return static_cast<int32_t>(c.block[2]);
    case abi::kCtaidX: return static_cast<int32_t>(ctaid_[0]);
    case abi::kCtaidY: return static_cast<int32_t>(ctaid_[1]);
    case abi::kCtaidZ: return static_cast<int32_t>(ctaid_[2]);
    case abi::kNctaidX: return static_cast<int32_t>(c.grid[0]);
    case abi::kNctaidY: return static_cast<int32_t>(c.grid[1]);
    case abi::kNctaidZ: return static_cast<int32_t>(c.grid[2]);
    case abi::kLaneId: return t.linear % 32;
    case abi::kWarpSize: return 32;
    default: return 0;
  }
}

void BlockRunner::barrier(const char* site) {
  if (degraded_) return;
  current_->state = State::Barrier;
  current_->site = site;
  yield();
}

uint64_t BlockRunner::shuffle(int32_t mode, uint32_t mask, uint32_t value, uint32_t b, uint32_t c, const char* site) {
  if (degraded_) return value;
  SimThread& t = *current_;
  t.state = State::Shuffle;
  t.site = site;
  t.mode = mode, t.mask = mask, t.value = value, t.b = b, t.c = c;
  yield();
  return t.result;
}

// Every warp whose lanes named in a waiting lane's mask have all arrived exchanges values, as
// PTX's shfl.sync defines: the source lane from the mode, b, the clamp c[4:0] and the segment
// mask c[12:8]; a source outside the segment gives the lane's own value and a false predicate.
bool BlockRunner::resolve_shuffles() {
  bool any = false;
  const int n = static_cast<int>(threads_.size());
  for (int w = 0; w * 32 < n; ++w) {
    const int first = w * 32, lanes = std::min(32, n - first);
    for (int l = 0; l < lanes; ++l) {
      SimThread& leader = threads_[first + l];
      if (leader.state != State::Shuffle) continue;
      uint32_t mask = leader.mask;
      bool complete = true, exited = false;
      int missing = -1;
      for (int m = 0; m < 32; ++m) {
        if (!(mask >> m & 1)) continue;
        if (m >= lanes) {
          missing = m, exited = true;
          continue;
        }
        State s = threads_[first + m].state;
        if (s == State::Exited) missing = m, exited = true;
        else if (s != State::Shuffle) complete = false;
      }
      if (!complete) continue;  // a lane of the mask waits at a barrier: break_deadlock reports it
      if (exited && launch_.options.sync)
        report("sync error (shuffle mask names a lane that " + std::string(missing >= lanes ? "does not exist" : "has exited") + ")",
               leader.site, leader,
               "mask " + hex(mask) + " names lane " + std::to_string(missing) + " of warp " + std::to_string(w));
      if (!(mask >> l & 1) && launch_.options.sync)
        report("sync error (shuffle by a lane outside its mask)", leader.site, leader, "mask " + hex(mask));
      uint32_t group[32];
      bool in_group[32] = {};
      for (int m = 0; m < lanes; ++m) {
        SimThread& t = threads_[first + m];
        if (m != l && !(mask >> m & 1)) continue;
        if (t.state != State::Shuffle) continue;
        in_group[m] = true;
        group[m] = t.value;
        if (launch_.options.sync && (t.site != leader.site || t.mask != mask || t.mode != leader.mode || t.c != leader.c))
          report("sync error (lanes of one shuffle disagree)", t.site, t,
                 "lane " + std::to_string(m) + " is at " + t.site + " with mask " + hex(t.mask) + " while lane " +
                     std::to_string(l) + " is at " + leader.site + " with mask " + hex(mask));
      }
      for (int m = 0; m < lanes; ++m) {
        if (!in_group[m]) continue;
        SimThread& t = threads_[first + m];
        const int lane = m, bval = static_cast<int>(t.b & 31), cval = static_cast<int>(t.c & 31);
        const int segmask = static_cast<int>((t.c >> 8) & 31);
        const int max_lane = (lane & segmask) | (cval & ~segmask), min_lane = lane & segmask;
        int j = lane;
        bool pval = false;
        switch (t.mode) {
          case abi::kShflUp: j = lane - bval, pval = j >= max_lane; break;
          case abi::kShflDown: j = lane + bval, pval = j <= max_lane; break;
          case abi::kShflBfly: j = lane ^ bval, pval = j <= max_lane; break;
          default: j = min_lane | (bval & ~segmask), pval = j <= max_lane; break;
        }
        if (!pval) j = lane;
        uint32_t v = t.value;
        if (j >= 0 && j < lanes && in_group[j]) {
          v = group[j];
        } else if (launch_.options.sync) {
          report("sync error (shuffle reads a lane outside the mask)", t.site, t,
                 "source lane " + std::to_string(j) + ", mask " + hex(mask));
        }
        t.result = static_cast<uint64_t>(v) | (static_cast<uint64_t>(pval) << 32);
      }
      for (int m = 0; m < lanes; ++m)
        if (in_group[m]) threads_[first + m].state = State::Runnable;
      any = true;
    }
  }
  return any;
}

// Releases the barrier when every thread that has not exited waits at it. Reports threads at
// different barriers, and threads that exited without reaching it (bar.sync is aligned: every
// thread of the block must take the same path to it).
bool BlockRunner::release_barrier() {
  const SimThread* first = nullptr;
  const SimThread* exited = nullptr;
  int waiting = 0, live = 0;
  for (const SimThread& t : threads_) {
    if (t.state == State::Exited) {
      if (!exited) exited = &t;
      continue;
    }
    ++live;
    if (t.state != State::Barrier) continue;
    ++waiting;
    if (!first) first = &t;
  }
  if (!first || waiting != live) return false;
  if (launch_.options.sync) {
    for (const SimThread& t : threads_)
      if (t.state == State::Barrier && t.site != first->site) {
        report("sync error (threads wait at different barriers)", first->site, *first,
               "while thread " + triple(t.tid) + " waits at " + t.site);
        break;
      }
    if (exited)
      report("sync error (barrier not reached by every thread of the block)", first->site, *first,
             std::to_string(waiting) + " threads wait here, but thread " + triple(exited->tid) + " and " +
                 std::to_string(threads_.size() - waiting - 1) + " others exited without reaching it");
  }
  for (SimThread& t : threads_)
    if (t.state == State::Barrier) t.state = State::Runnable;
  epoch_ += 1;
  return true;
}

void BlockRunner::break_deadlock() {
  const SimThread* at_barrier = nullptr;
  const SimThread* at_shuffle = nullptr;
  for (const SimThread& t : threads_) {
    if (t.state == State::Barrier && !at_barrier) at_barrier = &t;
    if (t.state == State::Shuffle && !at_shuffle) at_shuffle = &t;
  }
  if (at_shuffle) {
    std::string other = at_barrier ? "thread " + triple(at_barrier->tid) + " waits at " + at_barrier->site
                                   : std::string("lanes of its mask never arrive");
    report("sync error (shuffle never completes)", at_shuffle->site, *at_shuffle, "mask " + hex(at_shuffle->mask) + "; " + other);
  } else {
    report("sync error (deadlock)", at_barrier ? at_barrier->site : "?", at_barrier ? *at_barrier : threads_[0],
           "no thread can proceed");
  }
  degraded_ = true;
  for (SimThread& t : threads_) {
    if (t.state == State::Shuffle) t.result = t.value;
    if (t.state != State::Exited) t.state = State::Runnable;
  }
}

void* BlockRunner::access(void* p, uint64_t bytes, uint32_t flags, uint64_t align, const char* site) {
  const Options& o = launch_.options;
  if (!o.race && !o.memcheck) return p;
  SimThread& t = *current_;
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uintptr_t base = reinterpret_cast<uintptr_t>(arena_);
  if (a >= base && a < base + arena_capacity_) return shared_access(t, a - base, bytes, flags, align, site);
  if (!o.memcheck) return p;
  return global_access(t, a, bytes, flags, align, site);
}

void* BlockRunner::shared_access(SimThread& t, uint64_t offset, uint64_t bytes, uint32_t flags, uint64_t align,
                                 const char* site) {
  const Options& o = launch_.options;
  const char* verb = flags & abi::kWrite ? "writes" : "reads";
  if (offset + bytes > launch_.shared_bytes) {
    if (o.memcheck)
      report("memcheck: out-of-bounds shared memory access", site, t,
             std::string(verb) + " bytes [" + std::to_string(offset) + ", " + std::to_string(offset + bytes) +
                 ") of a " + std::to_string(launch_.shared_bytes) + "-byte shared arena");
    return scratch_;
  }
  if (o.memcheck && offset % align != 0) {
    report("memcheck: misaligned shared memory access", site, t,
           "offset " + std::to_string(offset) + " is not a multiple of " + std::to_string(align));
    return scratch_;
  }
  const int16_t me = static_cast<int16_t>(t.linear);
  bool reported = false;
  for (uint64_t k = offset; k < offset + bytes && !reported; ++k) {
    ByteShadow& s = shadow_[k];
    if (flags & abi::kRead) {
      if (o.memcheck && s.write_epoch < block_start_epoch_) {
        report("memcheck: uninitialized shared memory read", site, t,
               "byte " + std::to_string(k) + " was never written by this block");
        reported = true;
      } else if (o.race && !(flags & abi::kAtomic) && s.write_epoch == epoch_ && s.writer != me) {
        report("race (read after write)", site, t,
               "reads shared byte " + std::to_string(k) + " written by thread " + triple(threads_[s.writer].tid) +
                   " with no barrier in between");
        reported = true;
      }
      if (s.read_epoch == epoch_) {
        if (s.reader != me) s.many_readers = true;
      } else {
        s.read_epoch = epoch_, s.reader = me, s.many_readers = false;
      }
    }
    if (flags & abi::kWrite) {
      if (o.race && !(flags & abi::kAtomic) && !reported) {
        if (s.write_epoch == epoch_ && s.writer != me) {
          report("race (write after write)", site, t,
                 "writes shared byte " + std::to_string(k) + " written by thread " + triple(threads_[s.writer].tid) +
                     " with no barrier in between");
          reported = true;
        } else if (s.read_epoch == epoch_ && (s.many_readers || s.reader != me)) {
          int16_t other = s.reader != me ? s.reader : -1;
          report("race (write after read)", site, t,
                 "writes shared byte " + std::to_string(k) + " read by " +
                     (other >= 0 ? "thread " + triple(threads_[other].tid) : std::string("other threads")) +
                     " with no barrier in between");
          reported = true;
        }
      }
      s.write_epoch = epoch_, s.writer = me;
    }
  }
  return arena_ + offset;
}

void* BlockRunner::global_access(SimThread& t, uintptr_t a, uint64_t bytes, uint32_t flags, uint64_t align,
                                 const char* site) {
  const std::vector<Memory::Allocation>& all = launch_.allocations;
  const char* verb = flags & abi::kWrite ? "writes" : "reads";
  const Memory::Allocation* hit = nullptr;
  if (last_allocation_ < all.size() && a >= all[last_allocation_].base &&
      a < all[last_allocation_].base + reserved_bytes(all[last_allocation_].size)) {
    hit = &all[last_allocation_];
  } else {
    auto it = std::upper_bound(all.begin(), all.end(), a,
                               [](uintptr_t v, const Memory::Allocation& x) { return v < x.base; });
    if (it != all.begin()) {
      --it;
      if (a < it->base + reserved_bytes(it->size)) {
        hit = &*it;
        last_allocation_ = static_cast<size_t>(it - all.begin());
      }
    }
  }
  auto what = [&] { return std::string(verb) + " " + std::to_string(bytes) + " bytes at " + hex(a); };
  if (hit && hit->live && a + bytes <= hit->base + hit->size && a % align == 0) return reinterpret_cast<void*>(a);
  if (!hit) {
    report("memcheck: access outside every allocation", site, t, what());
    return scratch_;
  }
  if (!hit->live) {
    report("memcheck: use after free", site, t,
           what() + ", " + std::to_string(a - hit->base) + " bytes into a freed " + std::to_string(hit->size) +
               "-byte allocation");
    return scratch_;
  }
  if (a + bytes > hit->base + hit->size) {
    report("memcheck: out-of-bounds global access", site, t,
           what() + ": bytes [" + std::to_string(a - hit->base) + ", " + std::to_string(a - hit->base + bytes) +
               ") of a " + std::to_string(hit->size) + "-byte allocation");
    return scratch_;
  }
  if (a % align != 0) {
    report("memcheck: misaligned global access", site, t,
           what() + ": the address is not a multiple of " + std::to_string(align));
    return scratch_;
  }
  return reinterpret_cast<void*>(a);
}

}  // namespace

std::string run_kernel(const Kernel& kernel, const LaunchConfig& config, void** params, Memory& memory,
                       const Options& options) {
  auto start = std::chrono::steady_clock::now();
  Launch launch;
  launch.kernel = &kernel;
  launch.config = config;
  launch.params = params;
  launch.options = options;
  launch.allocations = memory.snapshot();
  launch.shared_bytes = round_up(kernel.static_shared, 16) + config.dynamic_shared;
  uint64_t blocks = static_cast<uint64_t>(config.grid[0]) * config.grid[1] * config.grid[2];
  launch.order.resize(blocks);
  for (uint64_t i = 0; i < blocks; ++i) launch.order[i] = static_cast<uint32_t>(i);
  static std::atomic<uint64_t> launches{0};
  std::mt19937_64 rng(options.seed * 0x9e3779b97f4a7c15ull + launches++);
  std::shuffle(launch.order.begin(), launch.order.end(), rng);

  auto work = [&] {
    try {
      BlockRunner runner(launch);
      runner.run_all();
    } catch (const std::exception& e) {
      launch.report(std::string("simulator failure: ") + e.what());
      launch.next = launch.order.size();
    }
  };
  int workers = static_cast<int>(std::min<uint64_t>(std::max(1, options.workers), blocks));
  std::vector<std::thread> helpers;
  for (int i = 1; i < workers; ++i) helpers.emplace_back(work);
  work();
  for (std::thread& h : helpers) h.join();
  g_nanoseconds += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
  if (launch.reports == 0) return "";
  std::string text = "kernel " + kernel.name + ": " + launch.first_report;
  if (launch.reports > 1) text += " (and " + std::to_string(launch.reports - 1) + " more reports)";
  return text;
}

void totals(long long& threads, double& seconds) {
  threads = g_threads.load();
  seconds = static_cast<double>(g_nanoseconds.load()) * 1e-9;
}

}  // namespace fuse::runtime::sim

// ---- the functions rewritten kernels call (ir/cuda_sim_abi.h) ----

using fuse::runtime::sim::t_runner;

extern "C" {
int32_t __fuse_sim_sreg(int32_t which) { return t_runner->special_register(which); }
void* __fuse_sim_shared_base() { return t_runner->shared_base(); }
void __fuse_sim_barrier(const char* site) { t_runner->barrier(site); }
uint64_t __fuse_sim_shfl(int32_t mode, uint32_t mask, uint32_t value, uint32_t b, uint32_t c, const char* site) {
  return t_runner->shuffle(mode, mask, value, b, c, site);
}
void* __fuse_sim_access(void* p, uint64_t bytes, uint32_t flags, uint64_t align, const char* site) {
  return t_runner->access(p, bytes, flags, align, site);
}
double __fuse_sim_nv_rsqrt(double x) { return 1.0 / __builtin_sqrt(x); }
float __fuse_sim_nv_rsqrtf(float x) { return 1.0f / __builtin_sqrtf(x); }
}
