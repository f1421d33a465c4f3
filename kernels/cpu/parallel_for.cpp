// parallel_for (kernels/cpu/parallel_for.h): contiguous ranges handed to a pool of threads that
// sleep between calls.
//
// A call splits [0, n) into `parts` ranges and publishes them; the calling thread and the pool's
// workers each claim the next unclaimed range (an atomic counter) until none is left. The caller
// never waits for a worker that has not started: if the workers are slow to wake (another process
// holds the other core), the caller computes every range itself, and then waits only for the
// ranges a worker has claimed. Which thread computes a range does not change its result.
//
// Starting a std::thread per call, as before, cost 40-80 us a call on the shared 2-core machine
// (a small training step makes about 80 calls); waking a sleeping worker costs a few.
#include "kernels/cpu/parallel_for.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace trainmem::kernels::cpu {

int cpu_threads() {
  static const int threads = [] {
    if (const char* env = std::getenv("TRAINMEM_CPU_THREADS")) return std::max(1, std::stoi(env));
    return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  }();
  return threads;
}

namespace {
// True on the pool's workers and on a thread inside parallel_for: a nested call runs serially.
thread_local bool t_in_parallel_for = false;

class Pool {
 public:
  explicit Pool(int workers) {
    for (int w = 0; w < workers; ++w) threads_.emplace_back([this] { work(); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  // Runs body on the ranges of [0, n) in `parts`, on this thread and the workers. One call at a time
  // (run_mutex_, held by the caller).
  void run(std::size_t n, std::size_t parts, const std::function<void(std::size_t, std::size_t)>& body) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      body_ = &body;
      n_ = n;
      parts_ = parts;
      next_.store(0);
      open_ = true;
      ++generation_;
    }
    wake_.notify_all();
    claim_ranges();
    // Every range is claimed: close the call, and wait for the workers still computing theirs.
    std::unique_lock<std::mutex> lock(mutex_);
    open_ = false;
    done_.wait(lock, [this] { return active_ == 0; });
    body_ = nullptr;
  }

  std::mutex run_mutex_;  // one parallel_for at a time uses the pool

 private:
  // Range p is [n * p / parts, n * (p + 1) / parts): their sizes differ by at most one.
  void claim_ranges() {
    for (std::size_t p = next_.fetch_add(1); p < parts_; p = next_.fetch_add(1))
      (*body_)(n_ * p / parts_, n_ * (p + 1) / parts_);
  }

  void work() {
    t_in_parallel_for = true;
    std::uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stopping_ || (open_ && generation_ != seen); });
        if (stopping_) return;
        seen = generation_;
        ++active_;  // the caller waits for this worker from now on
      }
      claim_ranges();
      {
        std::lock_guard<std::mutex> lock(mutex_);
        --active_;
      }
      done_.notify_one();
    }
  }

  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  bool stopping_ = false, open_ = false;
  std::uint64_t generation_ = 0;
  int active_ = 0;  // workers inside claim_ranges of the open call
  const std::function<void(std::size_t, std::size_t)>* body_ = nullptr;
  std::size_t n_ = 0, parts_ = 0;
  std::atomic<std::size_t> next_{0};
};

Pool& pool() {
  static Pool instance(cpu_threads() - 1);
  return instance;
}
}  // namespace

void parallel_for(std::size_t n, std::size_t min_per_thread,
                  const std::function<void(std::size_t, std::size_t)>& body) {
  const std::size_t by_size = n / std::max<std::size_t>(1, min_per_thread);
  const std::size_t parts = std::min(static_cast<std::size_t>(cpu_threads()), std::max<std::size_t>(1, by_size));
  if (parts <= 1 || t_in_parallel_for) {
    if (n > 0) body(0, n);
    return;
  }
  Pool& p = pool();
  std::unique_lock<std::mutex> busy(p.run_mutex_, std::try_to_lock);
  if (!busy.owns_lock()) {  // another thread's call holds the pool: this one runs serially
    body(0, n);
    return;
  }
  t_in_parallel_for = true;
  p.run(n, parts, body);
  t_in_parallel_for = false;
}

}  // namespace trainmem::kernels::cpu
