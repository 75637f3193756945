#include "server_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <regex>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace duet::testing {
namespace {

int next_log_number() {
  static int value = 0;
  return value++;
}

std::string read_line(int fd, std::chrono::seconds timeout) {
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

}  // namespace

ServerProcess::ServerProcess(std::vector<std::string> flags, const std::string& model_dir, bool wait_until_ready) {
  signal(SIGPIPE, SIG_IGN);
  std::vector<std::string> args = {DUET_BINARY, "serve"};
  if (!model_dir.empty()) args.push_back(model_dir);  // empty: the binary's own default model, as scripts/run.sh
  args.insert(args.end(), {"--port", "0"});
  args.insert(args.end(), flags.begin(), flags.end());
  int out[2];
  if (pipe(out) != 0) throw std::runtime_error("pipe");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, out[0]);
  log_path_ = std::filesystem::temp_directory_path() /
              ("duet-serve-" + std::to_string(getpid()) + "-" + std::to_string(next_log_number()) + ".log");
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

ServerProcess::~ServerProcess() {
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

httplib::Client ServerProcess::client() const {
  httplib::Client client("127.0.0.1", port_);
  client.set_read_timeout(120);
  client.set_connection_timeout(10);
  client.set_tcp_nodelay(true);
  return client;
}

bool ServerProcess::alive() const { return pid_ > 0 && kill(pid_, 0) == 0 && waitpid(pid_, nullptr, WNOHANG) == 0; }

void ServerProcess::send_signal(int number) const { kill(pid_, number); }

std::optional<int> ServerProcess::wait_exit(std::chrono::milliseconds limit) {
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

std::optional<double> ServerProcess::metric(const std::string& name, const std::string& key) const {
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

std::optional<double> ServerProcess::wait_for_metric(const std::string& name, const std::function<bool(double)>& done,
                                                     std::chrono::milliseconds limit) const {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::optional<double> value;
  while (std::chrono::steady_clock::now() < deadline) {
    value = metric(name);
    if (value && done(*value)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return value;
}

}  // namespace duet::testing
