#pragma once
// Test helpers for decisions: the goldens of tools/make_decision_fixtures.py (tests/fixtures/decisions: requests,
// their ids and spans from an independent Python encoder, transformers' fp32 final-norm rows, and the
// probabilities of an independent fp32 PyTorch head), read as they are. A missing fixture throws: the tests fail,
// they never skip.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "../tests_dir.h"
#include "checkpoint/checkpoint.h"
#include "decision/encoder.h"
#include "decision/head_math.h"

namespace duet::testing {

inline std::string tests_path(const std::string& relative) {
  return (std::filesystem::path(tests_dir()) / relative).string();
}
inline std::string demo_dir() { return tests_path("../models/demo"); }
inline std::string tiny_clef_dir() { return tests_path("fixtures/models/tiny-mm-clef"); }
inline std::string qwen35_tokenizer_dir() { return tests_path("fixtures/tokenizer/qwen35-synthetic"); }

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("missing fixture " + path + " (tools/make_decision_fixtures.py makes it)");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// tests/fixtures/decisions/<name>.json: {"head_config", "checks", ..., "cases": [...]}.
inline const nlohmann::json& decision_goldens(const std::string& name) {
  static std::map<std::string, nlohmann::json> loaded;
  auto it = loaded.find(name);
  if (it == loaded.end())
    it = loaded.emplace(name, nlohmann::json::parse(read_text(tests_path("fixtures/decisions/" + name + ".json"))))
             .first;
  return it->second;
}

// The final-norm rows transformers computed for the cases stored with rows ([L, h] fp32, by case name).
inline const checkpoint::Checkpoint& golden_rows(const std::string& name) {
  static std::map<std::string, checkpoint::Checkpoint> opened;
  auto it = opened.find(name);
  if (it == opened.end()) {
    const std::string path = tests_path("fixtures/decisions/" + name + ".rows.safetensors");
    if (!std::filesystem::exists(path)) throw std::runtime_error("missing fixture " + path);
    it = opened.emplace(name, checkpoint::Checkpoint::open_file(path)).first;
  }
  return it->second;
}

inline std::vector<float> rows_of(const std::string& file, const std::string& case_name) {
  const checkpoint::TensorView* t = golden_rows(file).find(case_name);
  if (t == nullptr) throw std::runtime_error(file + ".rows.safetensors has no rows for " + case_name);
  return {t->data<float>(), t->data<float>() + t->element_count()};
}

inline decision::QuestionType type_of(const std::string& name) {
  if (name == "noul") return decision::QuestionType::noul;
  if (name == "choice") return decision::QuestionType::choice;
  if (name == "score") return decision::QuestionType::score;
  throw std::runtime_error("unknown question type " + name);
}

// An encoding as the goldens write it: {"ids", "questions": [{"type", "span", "options": [{"span"}]}]}.
inline decision::Encoding encoding_of(const nlohmann::json& golden) {
  decision::Encoding encoding;
  encoding.ids = golden.at("ids").get<std::vector<int32_t>>();
  for (const auto& q : golden.at("questions")) {
    decision::EncodedQuestion question;
    question.type = type_of(q.at("type"));
    question.span = {q.at("span")[0], q.at("span")[1]};
    for (const auto& o : q.at("options")) question.options.push_back({o.at("span")[0], o.at("span")[1]});
    encoding.questions.push_back(question);
  }
  return encoding;
}

// The golden probabilities (or logits) of every option, questions in order.
inline std::vector<double> golden_values(const nlohmann::json& results, const char* key) {
  std::vector<double> out;
  for (const auto& question : results)
    for (double v : question.at(key)) out.push_back(v);
  return out;
}

// Probabilities of each question (the softmax of its options' logits), questions in order.
inline std::vector<double> question_probabilities(const std::vector<float>& logits,
                                                  const decision::Encoding& encoding) {
  std::vector<double> out;
  size_t next = 0;
  for (const decision::EncodedQuestion& question : encoding.questions) {
    std::vector<float> p(logits.begin() + next, logits.begin() + next + question.options.size());
    decision::softmax(p);
    out.insert(out.end(), p.begin(), p.end());
    next += question.options.size();
  }
  return out;
}

}  // namespace duet::testing
