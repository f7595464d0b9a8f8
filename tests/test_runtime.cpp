// The runtime's thread pool and buffers.
#include <catch2/catch.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <type_traits>
#include <vector>

#include "ir/error.h"
#include "runtime/buffer.h"
#include "runtime/cpu_scratch.h"
#include "runtime/thread_pool.h"

using fuse::ir::DType;
using fuse::ir::Error;
using fuse::ir::HostArray;
using fuse::runtime::Buffer;
using fuse::runtime::Device;
using fuse::runtime::DeviceKind;
using fuse::runtime::ThreadPool;

namespace {

struct Chunk {
  int64_t begin, end;
  std::thread::id thread;
};

/// Runs parallel_for over [begin, end) and checks that its chunks cover each index once, have at
/// least `grain` iterations when there are several, number at most one per thread, and that a
/// range too small to split runs as one chunk on the caller.
void check_cover(ThreadPool& pool, int64_t begin, int64_t end, int64_t grain) {
  CAPTURE(pool.num_threads(), begin, end, grain);
  int64_t size = std::max<int64_t>(end - begin, 0);
  std::vector<std::atomic<int>> hits(size);
  std::mutex mutex;
  std::vector<Chunk> chunks;
  pool.parallel_for(begin, end, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) hits[i - begin].fetch_add(1);
    std::lock_guard<std::mutex> lock(mutex);
    chunks.push_back({lo, hi, std::this_thread::get_id()});
  });
  for (int64_t i = 0; i < size; ++i) {
    CAPTURE(i);
    REQUIRE(hits[i].load() == 1);
  }
  if (size == 0) {
    REQUIRE(chunks.empty());
    return;
  }
  REQUIRE(static_cast<int>(chunks.size()) <= pool.num_threads());
  for (const Chunk& c : chunks) REQUIRE(c.begin < c.end);
  if (chunks.size() > 1)
    for (const Chunk& c : chunks) REQUIRE(c.end - c.begin >= grain);
  if (size < 2 * std::max<int64_t>(grain, 1)) {
    REQUIRE(chunks.size() == 1);
    REQUIRE(chunks[0].thread == std::this_thread::get_id());
  }
}

/// The distinct threads that ran chunks of a range split into `pool.num_threads()` slow chunks.
std::set<std::thread::id> threads_used(ThreadPool& pool) {
  std::mutex mutex;
  std::set<std::thread::id> ids;
  pool.parallel_for(0, pool.num_threads(), 1, [&](int64_t, int64_t) {
    // Slow enough that the caller cannot take every chunk before a worker wakes up.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::lock_guard<std::mutex> lock(mutex);
    ids.insert(std::this_thread::get_id());
  });
  return ids;
}

/// User + system CPU time of the whole process, in seconds.
double process_cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](timeval t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

}  // namespace

TEST_CASE("parallel_for covers every index exactly once", "[runtime][thread_pool]") {
  ThreadPool four(4);
  ThreadPool one(1);
  // Idle threads that block at once, and ones that spin far longer than any chunk here takes:
  // the waits end on the work being done, whichever way a thread waits.
  ThreadPool four_blocking(4, std::chrono::microseconds(0));
  ThreadPool three_spinning(3, std::chrono::seconds(10));
  for (ThreadPool* pool : {&ThreadPool::global(), &four, &one, &four_blocking, &three_spinning})
    for (int64_t begin : {-5, 0, 7})
      for (int64_t size : {-3, 0, 1, 2, 3, 7, 64, 1000, 4097})
        for (int64_t grain : {-1, 0, 1, 2, 3, 16, 1000, 100000})
          check_cover(*pool, begin, begin + size, grain);
}

TEST_CASE("parallel_for uses several threads for big ranges", "[runtime][thread_pool]") {
  ThreadPool four(4);
  REQUIRE(four.num_threads() == 4);
  REQUIRE(threads_used(four).size() > 1);
  ThreadPool& global = ThreadPool::global();
  if (std::thread::hardware_concurrency() > 1 && global.num_threads() > 1)
    REQUIRE(threads_used(global).size() > 1);
}

TEST_CASE("parallel_for rethrows a chunk's exception on the caller", "[runtime][thread_pool]") {
  ThreadPool four(4);
  for (ThreadPool* pool : {&ThreadPool::global(), &four}) {
    // Thrown from the chunk holding index 0 (the caller's own) and from the last one.
    for (int64_t bad : {int64_t{0}, int64_t{999}}) {
      auto body = [&](int64_t lo, int64_t hi) {
        if (lo <= bad && bad < hi) throw std::runtime_error("bad index " + std::to_string(bad));
      };
      REQUIRE_THROWS_AS(pool->parallel_for(0, 1000, 1, body), std::runtime_error);
      REQUIRE_THROWS_WITH(pool->parallel_for(0, 1000, 1, body), "bad index " + std::to_string(bad));
    }
    // Every chunk throws: one exception comes out, and the pool still works afterwards.
    REQUIRE_THROWS_AS(pool->parallel_for(0, 1000, 1, [](int64_t, int64_t) { throw Error("x"); }), Error);
    // A range that runs inline throws straight through.
    REQUIRE_THROWS_AS(pool->parallel_for(0, 3, 10, [](int64_t, int64_t) { throw std::logic_error("y"); }),
                      std::logic_error);
    check_cover(*pool, 0, 1000, 1);
  }
}

TEST_CASE("nested parallel_for runs inline without deadlock", "[runtime][thread_pool]") {
  ThreadPool four(4);
  for (ThreadPool* pool : {&ThreadPool::global(), &four}) {
    std::vector<std::atomic<int>> hits(64 * 100);
    pool->parallel_for(0, 64, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t row = lo; row < hi; ++row)
        pool->parallel_for(0, 100, 1, [&](int64_t clo, int64_t chi) {
          for (int64_t col = clo; col < chi; ++col) hits[row * 100 + col].fetch_add(1);
        });
    });
    for (const std::atomic<int>& h : hits) REQUIRE(h.load() == 1);
  }
  // A chunk of one pool may also use another pool: it runs inline there too.
  std::atomic<int64_t> total{0};
  four.parallel_for(0, 8, 1, [&](int64_t lo, int64_t hi) {
    ThreadPool::global().parallel_for(lo * 10, hi * 10, 1, [&](int64_t a, int64_t b) { total += b - a; });
  });
  REQUIRE(total.load() == 80);
}

TEST_CASE("many small parallel_for calls complete", "[runtime][thread_pool]") {
  ThreadPool four(4);
  for (ThreadPool* pool : {&ThreadPool::global(), &four}) {
    std::atomic<int64_t> sum{0};
    for (int call = 0; call < 1000; ++call)
      pool->parallel_for(0, 16, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) sum += i;
      });
    REQUIRE(sum.load() == 1000 * (15 * 16 / 2));
  }
}

TEST_CASE("several threads may call parallel_for on one pool at once", "[runtime][thread_pool]") {
  ThreadPool four(4);
  std::atomic<int64_t> sum{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t)
    callers.emplace_back([&] {
      for (int call = 0; call < 200; ++call)
        four.parallel_for(0, 100, 1, [&](int64_t lo, int64_t hi) { sum += hi - lo; });
    });
  for (std::thread& t : callers) t.join();
  REQUIRE(sum.load() == 4 * 200 * 100);
}

// Callers publish their jobs in a fixed set of slots (64); beyond that many at once a caller runs
// its range alone. 96 callers, guided and even splits mixed, each range covered exactly once.
TEST_CASE("more threads calling parallel_for at once than the pool has slots", "[runtime][thread_pool]") {
  ThreadPool four(4);
  constexpr int kCallers = 96, kCalls = 40, kSize = 1000;
  std::vector<std::vector<std::atomic<int>>> hits(kCallers);
  for (auto& h : hits) h = std::vector<std::atomic<int>>(kSize);
  std::vector<std::thread> callers;
  for (int t = 0; t < kCallers; ++t)
    callers.emplace_back([&, t] {
      for (int call = 0; call < kCalls; ++call) {
        auto body = [&](int64_t lo, int64_t hi) {
          for (int64_t i = lo; i < hi; ++i) hits[t][i].fetch_add(1);
        };
        if (call % 2) four.parallel_for_guided(0, kSize, 3, 50, body);
        else four.parallel_for(0, kSize, 1, body);
      }
    });
  for (std::thread& t : callers) t.join();
  int wrong = 0;
  for (auto& h : hits)
    for (auto& v : h) wrong += v.load() != kCalls;
  REQUIRE(wrong == 0);
}

TEST_CASE("an idle pool uses no CPU", "[runtime][thread_pool]") {
  // Spins briefly at most (ThreadPool::kDefaultSpin): after work, sleeping workers cost (almost)
  // no CPU time.
  ThreadPool eight(8);
  std::atomic<int64_t> sum{0};
  for (ThreadPool* pool : {&ThreadPool::global(), &eight})
    for (int call = 0; call < 100; ++call)
      pool->parallel_for(0, 1 << 16, 1, [&](int64_t lo, int64_t hi) { sum += hi - lo; });
  REQUIRE(sum.load() == 200 * (1 << 16));
  double before = process_cpu_seconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  double used = process_cpu_seconds() - before;
  CAPTURE(used);
  REQUIRE(used < 0.050);
}

TEST_CASE("parallel_for_guided covers every index once in whole units that shrink", "[runtime][thread_pool]") {
  ThreadPool four(4);
  ThreadPool one(1);
  for (ThreadPool* pool : {&ThreadPool::global(), &four, &one})
    for (int64_t begin : {-5, 0, 7})
      for (int64_t size : {-3, 0, 1, 2, 11, 12, 13, 64, 1000, 4097})
        for (int64_t unit : {-1, 0, 1, 3, 12})
          for (int64_t max_units : {0, 1, 4, 1000}) {
            CAPTURE(pool->num_threads(), begin, size, unit, max_units);
            int64_t u = std::max<int64_t>(unit, 1), most = std::max<int64_t>(max_units, 1) * u;
            std::vector<std::atomic<int>> hits(std::max<int64_t>(size, 0));
            std::mutex mutex;
            std::vector<Chunk> chunks;
            pool->parallel_for_guided(begin, begin + size, unit, max_units, [&](int64_t lo, int64_t hi) {
              for (int64_t i = lo; i < hi; ++i) hits[i - begin].fetch_add(1);
              std::lock_guard<std::mutex> lock(mutex);
              chunks.push_back({lo, hi, std::this_thread::get_id()});
            });
            for (const std::atomic<int>& h : hits) REQUIRE(h.load() == 1);
            if (size <= 0) {
              REQUIRE(chunks.empty());
              continue;
            }
            std::sort(chunks.begin(), chunks.end(), [](const Chunk& x, const Chunk& y) { return x.begin < y.begin; });
            for (const Chunk& c : chunks) {
              CAPTURE(c.begin, c.end);
              REQUIRE((c.begin - begin) % u == 0);
              if (c.end != begin + size) {  // all but the last: whole units, at most max_units
                REQUIRE((c.end - c.begin) % u == 0);
                REQUIRE(c.end - c.begin <= most);
              } else if (chunks.size() > 1) {
                REQUIRE(c.end - c.begin < most + u);
              }
            }
            if (pool->num_threads() == 1) {
              REQUIRE(chunks.size() == 1);
              continue;
            }
            // The first claim takes one thread's share of the range (whole units, at least one,
            // at most max_units), or all of it when less than a unit would be left.
            int64_t first = std::clamp<int64_t>((size / pool->num_threads() + u - 1) / u, 1, most / u) * u;
            if (size - first < u) first = size;
            REQUIRE(chunks.front().end - chunks.front().begin == first);
          }
}

TEST_CASE("parallel_for_guided leaves no work waiting for a slow thread", "[runtime][thread_pool]") {
  // Whichever thread claims the first chunk stays in it until every other chunk is done: the
  // other thread must claim them all (with one chunk a thread, it would have had half).
  ThreadPool two(2);
  std::mutex mutex;
  std::condition_variable others_done;
  int64_t done = 0;
  std::set<std::thread::id> others;
  int other_chunks = 0;
  bool timed_out = false;
  two.parallel_for_guided(0, 64, 1, 64, [&](int64_t lo, int64_t hi) {
    std::unique_lock<std::mutex> lock(mutex);
    if (lo == 0) {  // the first claim (not necessarily the first chunk to get here)
      // A guard, not a timing assertion: fails the test instead of hanging it.
      timed_out = !others_done.wait_for(lock, std::chrono::seconds(60), [&] { return done == 64 - (hi - lo); });
      return;
    }
    done += hi - lo;
    ++other_chunks;
    others.insert(std::this_thread::get_id());
    others_done.notify_all();
  });
  REQUIRE_FALSE(timed_out);
  REQUIRE(done == 32);  // the first claim took 64 / 2
  REQUIRE(others.size() == 1);
  REQUIRE(other_chunks == 6);  // 16, 8, 4, 2, 1, 1
}

TEST_CASE("a thread pool needs at least one thread", "[runtime][thread_pool]") {
  REQUIRE_THROWS_AS(ThreadPool(0), Error);
  REQUIRE_THROWS_WITH(ThreadPool(2, std::chrono::microseconds(-1)), "error: a thread pool's spin time cannot be negative");
  REQUIRE(ThreadPool::global().num_threads() >= 1);
}

TEST_CASE("Device names", "[runtime][buffer]") {
  REQUIRE(Device::cpu().str() == "cpu");
  REQUIRE(Device::cpu().kind == DeviceKind::Cpu);
  REQUIRE(Device::cuda(1).str() == "cuda:1");
  REQUIRE(Device::cuda(0) != Device::cpu());
}

TEST_CASE("Buffer memory is aligned, and huge-page aligned when large", "[runtime][buffer]") {
  for (int64_t n : {1, 3, 15, 16, 100, 4097, 100000}) {
    Buffer b = Buffer::empty(DType::F32, {n});
    CAPTURE(n);
    REQUIRE(b.size_bytes() == static_cast<std::size_t>(n) * 4);
    REQUIRE(reinterpret_cast<uintptr_t>(b.data()) % 64 == 0);
    std::memset(b.data(), 0xab, b.size_bytes());
  }
  for (int64_t bytes : {int64_t{2} << 20, (int64_t{3} << 20) + 5, int64_t{16} << 20}) {
    Buffer b = Buffer::empty(DType::Bool, {bytes});
    CAPTURE(bytes);
    REQUIRE(reinterpret_cast<uintptr_t>(b.data()) % (2 << 20) == 0);
    std::memset(b.data(), 1, b.size_bytes());
  }
}

TEST_CASE("HostArray memory is aligned, and huge-page aligned when large", "[runtime][host_array]") {
  // 64-byte lines below 2 MiB; from 2 MiB on, 2 MiB pages (a transpose's tiles read 16 rows on
  // pages of their own). Copies and moves keep both, and the values.
  for (int64_t n : std::vector<int64_t>{1, 3, 16, 100'000, (int64_t{2} << 20) / 4 - 1, (int64_t{2} << 20) / 4, 3'000'001}) {
    CAPTURE(n);
    HostArray a(DType::F32, {n});
    bool large = n * 4 >= (int64_t{2} << 20);
    REQUIRE(reinterpret_cast<uintptr_t>(a.data()) % (large ? (2 << 20) : 64) == 0);
    for (int64_t i = 0; i < n; i += 997) a.set_f64(i, static_cast<double>(i));
    HostArray copy = a;
    REQUIRE(reinterpret_cast<uintptr_t>(copy.data()) % (large ? (2 << 20) : 64) == 0);
    HostArray moved = std::move(copy);
    for (int64_t i = 0; i < n; i += 997) REQUIRE(moved.get_f64(i) == static_cast<double>(i));
  }
}

TEST_CASE("Buffer round-trips a HostArray of every dtype", "[runtime][buffer]") {
  for (DType dtype : fuse::ir::kAllDTypes)
    for (const fuse::ir::ConcreteShape& shape :
         {fuse::ir::ConcreteShape{}, fuse::ir::ConcreteShape{5}, fuse::ir::ConcreteShape{2, 3, 4}}) {
      CAPTURE(fuse::ir::dtype_name(dtype), fuse::ir::shape_str(shape));
      HostArray a(dtype, shape);
      for (int64_t i = 0; i < a.size(); ++i) a.set_f64(i, dtype == DType::Bool ? i % 2 : 1.5 * i - 7);
      Buffer b = Buffer::from_host(a);
      REQUIRE(b.dtype() == dtype);
      REQUIRE(b.shape() == shape);
      REQUIRE(b.device() == Device::cpu());
      REQUIRE(b.num_elements() == a.size());
      REQUIRE(b.size_bytes() == a.bytes.size());
      REQUIRE(std::memcmp(b.data(), a.data(), a.bytes.size()) == 0);
      HostArray back = b.to_host();
      REQUIRE(back.dtype == dtype);
      REQUIRE(back.shape == shape);
      REQUIRE(back.bytes == a.bytes);
    }
}

// Compiled kernels write non-temporally from a 64-byte line on (row-wise reductions only rows
// that start on one), and a vector load that straddles two lines costs two: HostArray storage
// (the outputs of Executable::run, the interpreter's arrays, .npy files) starts on a line
// whatever its size, also after a copy, a move or a resize.
TEST_CASE("HostArray storage is 64-byte aligned", "[runtime][buffer]") {
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 64 == 0; };
  for (int64_t n : {1, 7, 1023, 4096, 1 << 20, 10'000'001}) {
    CAPTURE(n);
    for (DType dtype : {DType::Bool, DType::F32, DType::F64}) {
      HostArray a(dtype, {n});
      CHECK(aligned(a.data()));
      HostArray copy = a;
      CHECK(aligned(copy.data()));
      HostArray moved = std::move(copy);
      CHECK(aligned(moved.data()));
      moved.bytes.resize(moved.bytes.size() + 17);
      CHECK(aligned(moved.data()));
    }
    HostArray from = HostArray::from<float>({n}, std::vector<float>(static_cast<size_t>(n), 1.5f));
    CHECK(aligned(from.data()));
    CHECK(from.as<float>()[n - 1] == 1.5f);
  }
}

TEST_CASE("zero-size Buffers are valid", "[runtime][buffer]") {
  for (const fuse::ir::ConcreteShape& shape : {fuse::ir::ConcreteShape{0}, fuse::ir::ConcreteShape{3, 0, 2}}) {
    Buffer b = Buffer::empty(DType::F64, shape);
    REQUIRE(b.num_elements() == 0);
    REQUIRE(b.size_bytes() == 0);
    HostArray h = b.to_host();
    REQUIRE(h.dtype == DType::F64);
    REQUIRE(h.shape == shape);
    REQUIRE(h.bytes.empty());
    Buffer c = Buffer::from_host(h);
    REQUIRE(c.shape() == shape);
    REQUIRE(c.size_bytes() == 0);
  }
}

TEST_CASE("Buffers move and do not copy", "[runtime][buffer]") {
  static_assert(!std::is_copy_constructible_v<Buffer> && !std::is_copy_assignable_v<Buffer>);
  static_assert(std::is_nothrow_move_constructible_v<Buffer> && std::is_nothrow_move_assignable_v<Buffer>);
  Buffer a = Buffer::from_host(HostArray::from<int32_t>({4}, {1, 2, 3, 4}));
  void* data = a.data();
  Buffer b(std::move(a));
  REQUIRE(b.data() == data);
  REQUIRE(b.shape() == fuse::ir::ConcreteShape{4});
  REQUIRE(b.to_host().bytes == HostArray::from<int32_t>({4}, {1, 2, 3, 4}).bytes);
  REQUIRE(a.data() == nullptr);
  REQUIRE(a.size_bytes() == 0);
  REQUIRE(a.num_elements() == 0);

  Buffer c = Buffer::empty(DType::F64, {1000});  // freed by the assignment
  c = std::move(b);
  REQUIRE(c.data() == data);
  REQUIRE(c.dtype() == DType::I32);
  REQUIRE(b.data() == nullptr);
  REQUIRE(b.num_elements() == 0);
  a = Buffer::empty(DType::I64, {2, 2});  // a moved-from Buffer can be reused
  REQUIRE(a.size_bytes() == 32);
}

TEST_CASE("Buffer errors", "[runtime][buffer]") {
  REQUIRE_THROWS_WITH(Buffer::empty(DType::F32, {4}, Device::cuda(0)),
                      Catch::Contains("CUDA buffers are not available in this build"));
  REQUIRE_THROWS_WITH(Buffer::from_host(HostArray::scalar(1.0f), Device::cuda(0)),
                      Catch::Contains("CUDA buffers are not available in this build"));
  REQUIRE_THROWS_WITH(Buffer::empty(DType::F32, {2, -1}), Catch::Contains("negative dim"));
  REQUIRE_THROWS_WITH(Buffer::empty(DType::F64, {int64_t{1} << 40, int64_t{1} << 30}),
                      Catch::Contains("too many bytes"));
}

// Compiled CPU kernels' scratch buffers (runtime/cpu_scratch.h): a slot's buffer is kept for the
// next task on the same thread, grows when a task needs more, is 64-byte (2 MiB when large)
// aligned, and is the thread's own; past the kept limit or the slots a buffer is per task.
TEST_CASE("kernel scratch buffers are kept per thread and slot", "[runtime][buffer]") {
  using fuse::runtime::kKeptScratchBytes;
  using fuse::runtime::kScratchSlots;
  auto address = [](void* p) { return reinterpret_cast<uintptr_t>(p); };
  void* a = fuse_cpu_scratch_acquire(0, 1000);
  REQUIRE(a != nullptr);
  CHECK(address(a) % 64 == 0);
  std::memset(a, 1, 1000);
  fuse_cpu_scratch_release(0, a);
  CHECK(fuse_cpu_scratch_acquire(0, 640) == a);  // kept, large enough
  fuse_cpu_scratch_release(0, a);
  void* b = fuse_cpu_scratch_acquire(1, 1000);
  CHECK(b != a);  // another slot
  fuse_cpu_scratch_release(1, b);
  void* big = fuse_cpu_scratch_acquire(0, 3 << 20);  // grown: 2 MiB pages
  REQUIRE(big != nullptr);
  CHECK(address(big) % (2 << 20) == 0);
  std::memset(big, 2, 3 << 20);
  fuse_cpu_scratch_release(0, big);
  CHECK(fuse_cpu_scratch_acquire(0, 1000) == big);
  fuse_cpu_scratch_release(0, big);
  // Another thread gets buffers of its own.
  void* other = nullptr;
  std::thread([&] {
    other = fuse_cpu_scratch_acquire(0, 1000);
    std::memset(other, 3, 1000);
    fuse_cpu_scratch_release(0, other);
  }).join();
  CHECK(other != big);
  // Beyond the slots and the kept size: allocated per task (freed on release; ASan checks).
  void* extra = fuse_cpu_scratch_acquire(kScratchSlots, 100);
  REQUIRE(extra != nullptr);
  fuse_cpu_scratch_release(kScratchSlots, extra);
  void* huge = fuse_cpu_scratch_acquire(2, kKeptScratchBytes + 1);
  REQUIRE(huge != nullptr);
  std::memset(huge, 4, 1 << 20);
  fuse_cpu_scratch_release(2, huge);
}

// A blocked matmul's shared packed B (ir::SharedPackedB): of the tasks that claim a group of
// panels, exactly one packs it, and a wait returns once it is published, with what it wrote.
TEST_CASE("claims of shared matmul panels: one claimer, waiters see its writes", "[runtime]") {
  for (int round = 0; round < 50; ++round) {
    int32_t flag = 0;
    std::array<int64_t, 64> panel{};
    std::atomic<int> claimers{0};
    std::vector<std::thread> tasks;
    std::array<int64_t, 4> seen{};
    for (int t = 0; t < 4; ++t)
      tasks.emplace_back([&, t] {
        if (fuse_cpu_claim_panels(&flag)) {
          claimers.fetch_add(1);
          for (size_t i = 0; i < panel.size(); ++i) panel[i] = static_cast<int64_t>(i) + round;
          fuse_cpu_publish_panels(&flag);
        }
        fuse_cpu_wait_for_panels(&flag);
        int64_t sum = 0;
        for (int64_t v : panel) sum += v;
        seen[t] = sum;
      });
    for (std::thread& t : tasks) t.join();
    CHECK(claimers.load() == 1);
    CHECK(flag == 2);
    for (int64_t sum : seen) CHECK(sum == 64 * 63 / 2 + 64 * round);
  }
  int32_t taken = 1;  // being packed by another task: not claimed again
  CHECK(fuse_cpu_claim_panels(&taken) == 0);
  CHECK(taken == 1);
}
