#pragma once
// Starts `duet serve` (the built binary) on the demo model (or another folder) on a free loopback port for
// end-to-end tests, and stops it at the end. The port comes from the server's first stdout line (--port 0).
#include <fcntl.h>
#include <httplib.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../run_command.h"
#include "../tests_dir.h"

extern char** environ;

namespace duet::testing {

inline std::string demo_model_dir() { return tests_dir() + "/../models/demo"; }

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
  // Returns once /health says the model is loaded, or (wait_until_ready false) as soon as the server listens.
  explicit ServerProcess(std::vector<std::string> flags, const std::string& model_dir = demo_model_dir(),
                         bool wait_until_ready = true) {
    signal(SIGPIPE, SIG_IGN);
    std::vector<std::string> args = {DUET_BINARY, "serve", model_dir, "--port", "0"};
    args.insert(args.end(), flags.begin(), flags.end());
    int out[2];
    if (pipe(out) != 0) throw std::runtime_error("pipe");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    log_path_ = std::filesystem::temp_directory_path() /
                ("duet-serve-" + std::to_string(getpid()) + "-" + std::to_string(counter()++) + ".log");
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::vector<char*> argv;
    for (auto& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    if (posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ) != 0)
      throw std::runtime_error("cannot start " + args[0]);
    posix_spawn_file_actions_destroy(&actions);
    close(out[1]);
    std::string line = read_line(out[0], std::chrono::seconds(60));
    close(out[0]);
    std::smatch match;
    if (!std::regex_search(line, match, std::regex(R"(http://[0-9.]+:([0-9]+))")))
      throw std::runtime_error("duet serve did not print its address; log: " + log_path_.string());
    port_ = std::stoi(match[1]);
    if (!wait_until_ready) return;
    for (int i = 0; i < 1200; ++i) {
      if (auto res = client().Get("/health"); res && res->status == 200) return;  // 503 while the model loads
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    throw std::runtime_error("duet serve did not answer /health");
  }

  ~ServerProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int status = 0;
      for (int i = 0; i < 100 && waitpid(pid_, &status, WNOHANG) == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (waitpid(pid_, &status, WNOHANG) == 0) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
      }
    }
  }

  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  httplib::Client client() const {
    httplib::Client client("127.0.0.1", port_);
    client.set_read_timeout(120);
    client.set_connection_timeout(10);
    client.set_tcp_nodelay(true);
    return client;
  }
  bool alive() const { return pid_ > 0 && kill(pid_, 0) == 0 && waitpid(pid_, nullptr, WNOHANG) == 0; }
  void send_signal(int number) const { kill(pid_, number); }
  // Waits for the process to exit; its exit code (128 + N for signal N), or nullopt if it still runs after `limit`.
  std::optional<int> wait_exit(std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    int status = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return std::nullopt;
  }
  // A sample of GET /metrics (the first line of that metric, whatever its labels); nullopt when absent.
  std::optional<double> metric(const std::string& name, const std::string& key = "") const {
    httplib::Headers headers;
    if (!key.empty()) headers.emplace("Authorization", "Bearer " + key);
    auto res = client().Get("/metrics", headers);
    if (!res || res->status != 200) return std::nullopt;
    std::stringstream lines(res->body);
    for (std::string line; std::getline(lines, line);)
      if (line.starts_with(name + "{") || line.starts_with(name + " "))
        return std::stod(line.substr(line.rfind(' ') + 1));
    return std::nullopt;
  }
  double resident_mb(const std::string& key = "") const {
    return metric("duet_process_resident_bytes", key).value_or(-1e6) / 1e6;
  }
  // Polls a metric until `done` holds for it (or `limit` passes); returns its last value.
  std::optional<double> wait_for_metric(const std::string& name, const std::function<bool(double)>& done,
                                        std::chrono::milliseconds limit = std::chrono::seconds(30)) const {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    std::optional<double> value;
    while (std::chrono::steady_clock::now() < deadline) {
      value = metric(name);
      if (value && done(*value)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return value;
  }
  const std::filesystem::path& log_path() const { return log_path_; }

 private:
  static int& counter() {
    static int value = 0;
    return value;
  }

  static std::string read_line(int fd, std::chrono::seconds timeout) {
    std::string line;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char c;
      if (read(fd, &c, 1) != 1) break;
      if (c == '\n') break;
      line += c;
    }
    return line;
  }

  pid_t pid_ = -1;
  int port_ = 0;
  std::filesystem::path log_path_;
};

}  // namespace duet::testing
