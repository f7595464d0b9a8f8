// A test-only time limit: generated code that loops forever cannot be interrupted from inside
// the process, so a watchdog thread ends the process with a message naming the case that hung,
// turning a hang into a failure that says what to rerun.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

namespace fuse::testing {

/// Seconds one case may take before the watchdog ends the process: FUSE_TEST_TIME_LIMIT when
/// set, else 300 (a case takes well under a second; sanitizers and a loaded machine, minutes).
inline double case_time_limit() {
  const char* env = std::getenv("FUSE_TEST_TIME_LIMIT");
  double seconds = env && *env ? std::atof(env) : 0;
  return seconds > 0 ? seconds : 300;
}

/// Armed for one case at a time: arm(what) before it, disarm() after. Still armed after the
/// limit, it prints "time limit: <what> ran for more than N s" to stderr and exits with status 3.
class Watchdog {
 public:
  explicit Watchdog(double seconds = case_time_limit()) : limit_(seconds), thread_([this] { watch(); }) {}
  ~Watchdog() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_one();
    thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void arm(std::string what) {
    {
      std::lock_guard lock(mutex_);
      what_ = std::move(what);
      deadline_ = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                          std::chrono::duration<double>(limit_));
      armed_ = true;
    }
    changed_.notify_one();
  }
  void disarm() {
    std::lock_guard lock(mutex_);
    armed_ = false;
  }

 private:
  void watch() {
    std::unique_lock lock(mutex_);
    while (!stopping_) {
      if (!armed_) {
        changed_.wait(lock);
        continue;
      }
      if (changed_.wait_until(lock, deadline_) == std::cv_status::timeout && armed_ &&
          std::chrono::steady_clock::now() >= deadline_) {
        std::fprintf(stderr, "time limit: %s ran for more than %g s (FUSE_TEST_TIME_LIMIT)\n", what_.c_str(), limit_);
        std::fflush(stderr);
        std::_Exit(3);
      }
    }
  }

  double limit_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::string what_;
  std::chrono::steady_clock::time_point deadline_;
  bool armed_ = false, stopping_ = false;
  std::thread thread_;  // last: starts once the state above exists
};

}  // namespace fuse::testing
