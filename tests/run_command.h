#pragma once
// Runs a shell command for a test (a reference in Python or node, a client, curl): its stdout and exit status.
#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace duet::testing {

struct CommandResult {
  std::string output;
  int status = -1;  // -1: it could not start, or did not exit normally
};

inline CommandResult run_command(const std::string& command) {
  CommandResult result;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return result;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) result.output.append(buffer, n);
  int status = pclose(pipe);
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

}  // namespace duet::testing
