// Not a test: the time parse_exact_json (what every POST body goes through first) takes against the body's shape:
// keys in one object, nesting depth, long arrays, long strings. Prints a markdown table for docs/benchmarks.md;
// each row is the best of --repeats runs. A shape past a limit is timed to its refusal.
//   json_parse_bench [--repeats 3]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "base/exact_json.h"

namespace {

std::string object_of(size_t keys) {
  std::string text = "{";
  for (size_t i = 0; i < keys; ++i)
    text.append(i ? ",\"k" : "\"k").append(std::to_string(i)).append("\":").append(std::to_string(i));
  return text + "}";
}

std::string array_of(size_t values) {
  std::string text = "[";
  for (size_t i = 0; i < values; ++i) text.append(i ? "," : "").append(std::to_string(i % 1000));
  return text + "]";
}

struct Shape {
  std::string name;
  std::string text;
};

}  // namespace

int main(int argc, char** argv) {
  int repeats = 3;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--repeats") == 0) repeats = std::atoi(argv[i + 1]);
  std::vector<Shape> shapes;
  for (size_t keys : {1000, 10000, 25000, 50000, 100000})
    shapes.push_back({std::to_string(keys) + " keys in one object", object_of(keys)});
  for (int depth : {64, 100000})
    shapes.push_back({"depth " + std::to_string(depth), std::string(depth, '[') + std::string(depth, ']')});
  shapes.push_back({"array of 1,000,000 numbers", array_of(1000000)});
  shapes.push_back({"array of 2,000,000 numbers", array_of(2000000)});
  shapes.push_back({"one string of 8 MiB", "\"" + std::string(8u << 20, 's') + "\""});
  std::printf("| body | bytes | parse_exact_json ms | outcome |\n|---|---|---|---|\n");
  for (const Shape& shape : shapes) {
    double best = 1e30;
    std::string outcome;
    for (int r = 0; r < repeats; ++r) {
      const auto start = std::chrono::steady_clock::now();
      try {
        auto parsed = duet::parse_exact_json(shape.text);
        outcome = "read";
      } catch (const duet::JsonLimitError& e) {
        outcome = e.about("refused:");
      }
      best =
          std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    }
    if (outcome.size() > 80) outcome = outcome.substr(0, 80) + "...";
    std::printf("| %s | %zu | %.2f | %s |\n", shape.name.c_str(), shape.text.size(), best, outcome.c_str());
  }
}
