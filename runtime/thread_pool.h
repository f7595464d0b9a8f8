// The CPU backend's worker threads: one process-wide pool that kernels split their outer loops
// over with parallel_for.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <thread>
#include <vector>

namespace fuse::runtime {

/// A fixed set of worker threads that run the chunks of parallel_for calls.
///
/// Idle threads spin for a short while (`spin`, 100 us by default), then block (C++20 atomic
/// waits, futexes on Linux): a worker after its last chunk, waiting for the next job; a caller
/// waiting for the other threads' chunks. Kernels are launched one after another with little
/// host work in between, and a thread that blocks costs far more than a futex call to wake: on
/// the 2-vCPU Intel Xeon VM a parallel_for over 4 MB took 158 us with threads that block at once
/// and 55 us with 10-100 us of spinning (its halted virtual CPU takes ~100 us to run again).
/// Spinning no longer than that keeps an idle process at ~0% CPU, which matters for a library
/// that lives inside other programs; FUSE_SPIN_US=0 turns it off (a machine shared with other
/// busy processes).
class ThreadPool {
 public:
  /// How long an idle thread spins before it blocks, unless FUSE_SPIN_US says otherwise.
  static constexpr std::chrono::microseconds kDefaultSpin{100};

  /// A pool in which `num_threads` threads take part in each parallel_for: the caller and
  /// num_threads - 1 workers; idle threads spin for `spin` before they block. num_threads must
  /// be >= 1 and spin >= 0.
  explicit ThreadPool(int num_threads, std::chrono::microseconds spin = kDefaultSpin);
  ~ThreadPool();  // wakes and joins the workers
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  /// The process-wide pool, created on first use: std::thread::hardware_concurrency() threads,
  /// or FUSE_NUM_THREADS when set (a positive integer; anything else throws ir::Error), spinning
  /// FUSE_SPIN_US microseconds when set (an integer from 0 to 1000000; anything else throws
  /// ir::Error), else kDefaultSpin, or 0 with more threads than the hardware has.
  static ThreadPool& global();

  /// Threads taking part in a parallel_for, the caller included.
  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  /// Runs body(chunk_begin, chunk_end) over contiguous chunks that cover [begin, end) exactly
  /// once, and returns when all are done. Chunks have at least `grain` iterations (grain < 1
  /// counts as 1), about one per thread, fewer when the range is small; a range of at most
  /// 2 * grain - 1 iterations is one chunk, run on the caller without waking anyone. The caller
  /// runs chunks too. An empty range (end <= begin) calls nothing.
  ///
  /// An exception thrown by a chunk is rethrown here once all running chunks have finished (the
  /// first one thrown wins; chunks not yet started are skipped). A parallel_for called from
  /// inside a chunk runs inline on that thread, so nesting cannot deadlock. Several threads may
  /// call parallel_for at once; their chunks share the workers.
  void parallel_for(int64_t begin, int64_t end, int64_t grain,
                    const std::function<void(int64_t, int64_t)>& body);

  /// As parallel_for, but claimed in chunks that shrink as the range runs out (guided
  /// self-scheduling): each claim takes the unclaimed iterations divided by the thread count,
  /// rounded up to a whole number of `unit`s (unit < 1 counts as 1) and at most `max_units` of
  /// them (< 1 counts as 1); a claim that would leave less than a unit takes that rest too. For
  /// work whose threads may not run at the same speed (a busy machine, a virtual CPU the host
  /// takes away, cores of different kinds): one chunk a thread leaves the others waiting for the
  /// slowest, while the first, large chunks keep most of the work in blocks as large as it
  /// wants. Every chunk starts a whole number of units from `begin`, so only the last one holds
  /// a partial unit. A range of one chunk, or any range on a pool of one thread, runs as one
  /// call on the caller; exceptions and nesting as in parallel_for.
  void parallel_for_guided(int64_t begin, int64_t end, int64_t unit, int64_t max_units,
                           const std::function<void(int64_t, int64_t)>& body);

 private:
  /// One parallel_for call, living on its caller's stack until all its chunks are done. Chunks
  /// are claimed and counted with atomics: no lock on the run path.
  struct Job {
    const std::function<void(int64_t, int64_t)>* body;
    int64_t begin, size, num_chunks;
    // Guided (parallel_for_guided) when unit > 0: chunks claimed from next_begin on.
    int64_t unit = 0, max_units = 0;
    std::atomic<int64_t> next_begin{0};
    std::atomic<int64_t> next_chunk{0};   // first chunk nobody has claimed yet
    std::atomic<int64_t> chunks_done{0};  // finished or skipped
    std::atomic<uint32_t> all_done{0};    // 1 once chunks_done reaches num_chunks: the caller
                                          // waits on it (32 bits: a futex word, not a proxy)
    std::atomic<bool> failed{false};      // a chunk threw: `error` is written (by its setter)
    std::exception_ptr error{};           // the first exception a chunk threw
  };
  /// Where a caller publishes its Job for the workers. Slots live as long as the pool, so a
  /// worker can count itself in `users` before it reads `job`; a caller that takes its job back
  /// out waits until `users` is 0, after which no worker can still hold a pointer to it.
  struct alignas(64) Slot {
    std::atomic<Job*> job{nullptr};
    std::atomic<int> users{0};
  };
  /// Callers publishing at once beyond this many run their ranges alone (still correct).
  static constexpr int kSlots = 64;

  void worker_loop();
  /// Claims chunks of `job` and runs them until none is left unclaimed; whether it ran any.
  bool run_chunks(Job& job);
  /// Publishes `job`, runs chunks of it on the caller too, and returns when all are done.
  void run(Job& job);

  std::vector<Slot> slots_ = std::vector<Slot>(kSlots);
  std::atomic<uint32_t> generation_{0};  // bumped when a job is published or the pool stops
  std::atomic<bool> stopping_{false};
  const std::chrono::nanoseconds spin_;  // how long an idle thread spins before it blocks
  std::vector<std::thread> workers_;
};

}  // namespace fuse::runtime
