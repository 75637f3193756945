#pragma once
// Where decisions' head work runs: off the engine thread, on a few workers. A decision's sink turns each prefill
// chunk's final-norm rows into the head's inputs and, after the last chunk, runs the head; on a 9B backbone that is
// seconds of host arithmetic for a 16K prompt (the memory projection and every evidence layer's keys and values over
// all rows). Done on the engine thread it held every other sequence's steps for that long; done on one worker it held
// every other decision's head. Here each decision is a key: the tasks of one key run one at a time in posting order
// (a sink sees its chunks in position order), while the tasks of different keys run side by side, so a short
// decision is not queued behind a long one's head. Nothing a task computes depends on what runs beside it: the
// head's math is per request (head_math.h: fixed-order products, parallel loops whose split depends on their size
// alone), so an answer's bytes are the same whatever shares the workers.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

namespace duet::engine {

class DecisionWorkers {
 public:
  explicit DecisionWorkers(size_t threads);  // at least one
  // Runs what is already posted, then joins.
  ~DecisionWorkers();
  DecisionWorkers(const DecisionWorkers&) = delete;
  DecisionWorkers& operator=(const DecisionWorkers&) = delete;

  size_t size() const { return threads_.size(); }
  // Queues `task` under `key`: tasks of one key run one at a time in posting order, tasks of different keys on
  // whichever workers are free. A task must not throw.
  void post(uint64_t key, std::function<void()> task);

 private:
  void loop();

  struct Strand {
    std::deque<std::function<void()>> tasks;
    bool running = false;  // a worker runs one of its tasks now: the next waits for it
  };

  std::mutex mutex_;
  std::condition_variable wake_;
  std::unordered_map<uint64_t, Strand> strands_;  // keys with tasks queued or running
  // Keys with a task ready to run and none running, oldest first. A key goes to the back after each task, so
  // decisions take turns when there are more of them than workers.
  std::deque<uint64_t> ready_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;  // last: started once the members above exist
};

}  // namespace duet::engine
