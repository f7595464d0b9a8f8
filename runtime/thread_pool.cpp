#include "runtime/thread_pool.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>

#include "ir/error.h"

namespace fuse::runtime {

namespace {

// True on a thread while it runs pool work (always, on a worker): a parallel_for issued from
// there runs inline, since waiting for other threads from inside a chunk could deadlock.
thread_local bool t_inside_pool = false;

constexpr int kMaxThreads = 4096;

// The size of parallel_for_guided's next chunk when `left` iterations are unclaimed.
int64_t guided_chunk(int64_t left, int64_t unit, int64_t max_units, int threads) {
  int64_t share = left / threads;
  int64_t units = std::clamp<int64_t>(share / unit + (share % unit != 0 ? 1 : 0), 1, max_units);
  return units >= left / unit ? left : units * unit;  // (no rest shorter than a unit; no overflow)
}

constexpr int kMaxSpinMicroseconds = 1'000'000;

/// The environment variable `name` as an integer in [lo, hi], or `fallback` when it is unset.
int integer_from_environment(const char* name, int lo, int hi, int fallback) {
  const char* env = std::getenv(name);
  if (!env) return fallback;
  int n = 0;
  const char* last = env + std::strlen(env);
  auto [end, ec] = std::from_chars(env, last, n);
  if (ec != std::errc() || end != last || n < lo || n > hi)
    throw ir::Error(std::string(name) + " must be an integer from " + std::to_string(lo) + " to " +
                    std::to_string(hi) + ", got '" + env + "'");
  return n;
}

/// Tells the core this thread is spinning: on x86 `pause` lets a hyperthread sibling run and
/// keeps the loop from flooding the memory system with loads.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

/// Spins until done() holds or `budget` has passed; whether done() held. The clock is read
/// every 64 tries only.
template <class Done>
bool spin_until(std::chrono::nanoseconds budget, Done done) {
  if (budget.count() <= 0) return done();
  auto start = std::chrono::steady_clock::now();
  for (int tries = 1;; ++tries) {
    if (done()) return true;
    cpu_relax();
    if (tries % 64 == 0 && std::chrono::steady_clock::now() - start > budget) return done();
  }
}

}  // namespace

ThreadPool::ThreadPool(int num_threads, std::chrono::microseconds spin) : spin_(spin) {
  if (num_threads < 1 || num_threads > kMaxThreads)
    throw ir::Error("a thread pool needs 1 to " + std::to_string(kMaxThreads) + " threads, got " +
                    std::to_string(num_threads));
  if (spin.count() < 0) throw ir::Error("a thread pool's spin time cannot be negative");
  workers_.reserve(num_threads - 1);
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  stopping_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (std::thread& t : workers_) t.join();
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool = [] {
    int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    int threads = integer_from_environment("FUSE_NUM_THREADS", 1, kMaxThreads, cores);
    // More threads than cores: a spinning thread may hold the core that the thread it waits
    // for needs (as libgomp, which then spins 1000 rounds instead of 300000).
    int spin = integer_from_environment("FUSE_SPIN_US", 0, kMaxSpinMicroseconds,
                                        threads <= cores ? static_cast<int>(kDefaultSpin.count()) : 0);
    return ThreadPool(threads, std::chrono::microseconds(spin));
  }();
  return pool;
}

void ThreadPool::worker_loop() {
  t_inside_pool = true;
  for (;;) {
    // Read before looking: a job published after the look bumps the generation, so the wait
    // below returns at once instead of sleeping through it.
    uint32_t seen = generation_.load();
    if (stopping_.load()) return;
    bool worked = false;
    for (Slot& slot : slots_) {
      if (!slot.job.load(std::memory_order_relaxed)) continue;  // (a hint; checked again below)
      // Counted in before reading the job (both sequentially consistent): the job's caller
      // clears the slot, then waits for users to be 0, so it cannot free a job read here.
      slot.users.fetch_add(1);
      if (Job* job = slot.job.load()) worked |= run_chunks(*job);
      slot.users.fetch_sub(1);
    }
    // A caller often publishes the next job a few microseconds later: spin before sleeping.
    if (!worked && !spin_until(spin_, [&] { return generation_.load(std::memory_order_relaxed) != seen; }))
      generation_.wait(seen);
  }
}

bool ThreadPool::run_chunks(Job& job) {
  bool ran = false;
  for (;;) {
    int64_t lo, hi;
    if (job.unit > 0) {
      int64_t claimed = job.next_begin.load(std::memory_order_relaxed), next;
      do {
        if (claimed >= job.size) return ran;
        next = claimed + guided_chunk(job.size - claimed, job.unit, job.max_units, num_threads());
      } while (!job.next_begin.compare_exchange_weak(claimed, next, std::memory_order_relaxed));
      lo = job.begin + claimed;
      hi = job.begin + next;
    } else {
      int64_t chunk = job.next_chunk.fetch_add(1, std::memory_order_relaxed);
      if (chunk >= job.num_chunks) return ran;
      // Chunk sizes differ by at most one; computed without multiplying, so no overflow.
      int64_t base = job.size / job.num_chunks, extra = job.size % job.num_chunks;
      lo = job.begin + chunk * base + std::min(chunk, extra);
      hi = lo + base + (chunk < extra ? 1 : 0);
    }
    ran = true;
    if (!job.failed.load(std::memory_order_relaxed)) {
      try {
        (*job.body)(lo, hi);
      } catch (...) {
        if (!job.failed.exchange(true)) job.error = std::current_exception();
      }
    }
    // Release: the caller, acquiring the last count, sees every chunk's writes and the error.
    if (job.chunks_done.fetch_add(1, std::memory_order_acq_rel) + 1 == job.num_chunks) {
      job.all_done.store(1, std::memory_order_release);
      job.all_done.notify_all();
    }
  }
}

void ThreadPool::parallel_for(int64_t begin, int64_t end, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& body) {
  if (end <= begin) return;
  int64_t size = end - begin;
  int64_t num_chunks = std::min<int64_t>(num_threads(), size / std::max<int64_t>(grain, 1));
  if (num_chunks <= 1 || t_inside_pool) {
    body(begin, end);
    return;
  }

  Job job{&body, begin, size, num_chunks};
  run(job);
}

void ThreadPool::parallel_for_guided(int64_t begin, int64_t end, int64_t unit, int64_t max_units,
                                     const std::function<void(int64_t, int64_t)>& body) {
  if (end <= begin) return;
  Job job{&body, begin, end - begin, 0};
  job.unit = std::max<int64_t>(unit, 1);
  job.max_units = std::max<int64_t>(max_units, 1);
  // The chunks depend only on what is left, not on who claims them: count them now.
  if (num_threads() > 1 && !t_inside_pool)
    for (int64_t left = job.size; left > 0; ++job.num_chunks)
      left -= guided_chunk(left, job.unit, job.max_units, num_threads());
  if (job.num_chunks <= 1) {
    body(begin, end);
    return;
  }
  run(job);
}

void ThreadPool::run(Job& job) {
  t_inside_pool = true;
  // A free slot (no job, no worker still counted in from an earlier one); with none, this
  // caller runs every chunk itself.
  Slot* slot = nullptr;
  for (Slot& s : slots_) {
    Job* none = nullptr;
    if (s.users.load() == 0 && s.job.compare_exchange_strong(none, &job)) {
      slot = &s;
      break;
    }
  }
  if (slot) {
    generation_.fetch_add(1);
    // As many workers as there are chunks for, not every sleeping worker (a job of two chunks on
    // a machine of 64 cores would wake 63 threads to find nothing).
    for (int64_t i = 1; i < std::min<int64_t>(job.num_chunks, num_threads()); ++i) generation_.notify_one();
  }
  run_chunks(job);
  // The others' last chunks are usually a few microseconds from done: spin before sleeping.
  spin_until(spin_, [&] { return job.all_done.load(std::memory_order_acquire) != 0; });
  while (job.all_done.load(std::memory_order_acquire) == 0) job.all_done.wait(0, std::memory_order_acquire);
  if (slot) {
    slot->job.store(nullptr);
    // Workers counted in may hold &job; new ones find the slot empty. They leave at once: every
    // chunk is claimed.
    while (slot->users.load() != 0) std::this_thread::yield();
  }
  t_inside_pool = false;
  if (job.error) std::rethrow_exception(job.error);
}

}  // namespace fuse::runtime
