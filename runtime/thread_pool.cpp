#include "runtime/thread_pool.h"

#include <algorithm>
#include <charconv>
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

int threads_from_environment() {
  if (const char* env = std::getenv("FUSE_NUM_THREADS")) {
    int n = 0;
    const char* last = env + std::strlen(env);
    auto [end, ec] = std::from_chars(env, last, n);
    if (ec != std::errc() || end != last || n < 1 || n > kMaxThreads)
      throw ir::Error("FUSE_NUM_THREADS must be an integer from 1 to " +
                      std::to_string(kMaxThreads) + ", got '" + env + "'");
    return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads < 1 || num_threads > kMaxThreads)
    throw ir::Error("a thread pool needs 1 to " + std::to_string(kMaxThreads) + " threads, got " +
                    std::to_string(num_threads));
  workers_.reserve(num_threads - 1);
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (std::thread& t : workers_) t.join();
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool(threads_from_environment());
  return pool;
}

void ThreadPool::worker_loop() {
  t_inside_pool = true;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    work_ready_.wait(lock, [this] { return stopping_ || !pending_.empty(); });
    if (pending_.empty()) return;  // stopping, and every queued chunk has been claimed
    run_chunks(*pending_.front(), lock);
  }
}

void ThreadPool::run_chunks(Job& job, std::unique_lock<std::mutex>& lock) {
  while (job.next_chunk < job.num_chunks) {
    int64_t chunk = job.next_chunk++;
    if (job.next_chunk == job.num_chunks)
      pending_.erase(std::find(pending_.begin(), pending_.end(), &job));
    if (!job.error) {
      int64_t lo, hi;
      if (job.unit > 0) {
        lo = job.begin + job.next_begin;
        hi = lo + guided_chunk(job.size - job.next_begin, job.unit, job.max_units, num_threads());
        job.next_begin = hi - job.begin;
      } else {
        // Chunk sizes differ by at most one; computed without multiplying, so no overflow.
        int64_t base = job.size / job.num_chunks, extra = job.size % job.num_chunks;
        lo = job.begin + chunk * base + std::min(chunk, extra);
        hi = lo + base + (chunk < extra ? 1 : 0);
      }
      std::exception_ptr error;
      lock.unlock();
      try {
        (*job.body)(lo, hi);
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      if (error && !job.error) job.error = error;
    }
    // The job's caller may return as soon as it sees the last chunk done, so `job` is not
    // touched after that except under this same lock hold (the loop test).
    if (++job.chunks_done == job.num_chunks) job_done_.notify_all();
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
  std::unique_lock<std::mutex> lock(mutex_);
  pending_.push_back(&job);
  for (int64_t i = 1; i < std::min<int64_t>(job.num_chunks, num_threads()); ++i) work_ready_.notify_one();
  run_chunks(job, lock);
  job_done_.wait(lock, [&] { return job.chunks_done == job.num_chunks; });
  t_inside_pool = false;
  if (job.error) std::rethrow_exception(job.error);
}

}  // namespace fuse::runtime
