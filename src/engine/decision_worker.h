#pragma once
// Where a decision's head work runs: off the engine thread. A decision's sink turns each prefill chunk's final-norm
// rows into the head's inputs and, after the last chunk, runs the head; on a 9B backbone that is seconds of host
// arithmetic for a 16K prompt (the memory projection and every evidence layer's keys and values over all rows).
// Done on the engine thread it held every other sequence's steps for that long. The worker runs those tasks on its
// own thread, in the order posted (a sink sees its chunks in position order), while the engine goes on stepping.
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace duet::engine {

class DecisionWorker {
 public:
  DecisionWorker();
  // Runs what is already posted, then joins.
  ~DecisionWorker();
  DecisionWorker(const DecisionWorker&) = delete;
  DecisionWorker& operator=(const DecisionWorker&) = delete;

  // Queues `task`; tasks run one at a time in posting order. A task must not throw.
  void post(std::function<void()> task);

 private:
  void loop();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace duet::engine
