#pragma once
// Starts `duet serve` (the built binary) on the demo model (or another folder) on a free loopback port for
// end-to-end tests, and stops it at the end. The port comes from the server's first stdout line (--port 0).
// The class is compiled once (server_process.cc, the duet_test_server library) rather than in every test file: its
// process handling and <regex> were about a third of each end-to-end test file's compile time.
#include <httplib.h>
#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "../run_command.h"
#include "../tests_dir.h"

namespace duet::testing {

inline bool demo_model_available() {
  return std::filesystem::exists(demo_model_dir() + "/config.json") &&
         std::filesystem::exists(demo_model_dir() + "/tokenizer.json");
}

// Why a test that needs the demo model is skipped (empty when it can run).
inline std::string demo_model_missing_reason() {
  return demo_model_available() ? "" : "the demo model (models/demo) is not in this checkout";
}

class ServerProcess {
 public:
  // Returns once /health says the model is loaded, or (wait_until_ready false) as soon as the server listens. An
  // empty `model_dir` starts `duet serve` without a model argument: the binary's default (models/demo), as
  // scripts/run.sh starts it.
  explicit ServerProcess(std::vector<std::string> flags, const std::string& model_dir = demo_model_dir(),
                         bool wait_until_ready = true);
  ~ServerProcess();

  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  httplib::Client client() const;
  bool alive() const;
  void send_signal(int number) const;
  // Waits for the process to exit; its exit code (128 + N for signal N), or nullopt if it still runs after `limit`.
  std::optional<int> wait_exit(std::chrono::milliseconds limit);
  // A sample of GET /metrics (the first line of that metric, whatever its labels); nullopt when absent.
  std::optional<double> metric(const std::string& name, const std::string& key = "") const;
  double resident_mb(const std::string& key = "") const {
    return metric("duet_process_resident_bytes", key).value_or(-1e6) / 1e6;
  }
  // Polls a metric until `done` holds for it (or `limit` passes); returns its last value.
  std::optional<double> wait_for_metric(const std::string& name, const std::function<bool(double)>& done,
                                        std::chrono::milliseconds limit = std::chrono::seconds(30)) const;
  const std::filesystem::path& log_path() const { return log_path_; }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  std::filesystem::path log_path_;
};

}  // namespace duet::testing
