// The decision prompt's text against the independent Python encoder (tools/decision_prompt.py, run here: it needs no
// torch). Python writes each request's prompt as its pieces of text (each piece is tokenized on its own) with the
// spans over them; the pieces, tokenized with the demo tokenizer and concatenated, must be duet's ids, and the spans
// duet's spans. The requests: every golden body, and bodies only the reference limits take or that the goldens do not
// cover (instructions of every JSON type, Python's falsy values, ids of any text, one option, many questions).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "../run_command.h"
#include "decision/encoder.h"
#include "decision_fixtures.h"
#include "tokenizer/tokenizer.h"

namespace duet::decision {
namespace {

using duet::testing::decision_goldens;

std::string question_body(const std::string& questions, const std::string& state = R"("a state")") {
  return R"({"model": "demo", "state": )" + state + R"(, "questions": )" + questions + "}";
}

// Bodies beyond the goldens, as a client would send them.
std::vector<std::string> extra_bodies() {
  std::vector<std::string> bodies = {
      question_body(R"({"q": {"type": "noul", "instructions": {"b": 1.0, "a": [true, null, "ä", 1e-7]}}})"),
      question_body(R"({"q": {"type": "choice", "instructions": [3, "x", {"k": 12345678901234567890123}],
                            "criteria": {"a": null, "b": "bee"}}})"),
      question_body(R"({"q": {"type": "score", "instructions": 2.5, "criteria": ["lo", "hi"]},
                        "r": {"type": "noul", "instructions": true}})"),
      question_body(R"({"f0": {"type": "noul", "instructions": false}, "f1": {"type": "noul", "instructions": 0},
                        "f2": {"type": "noul", "instructions": -0.0}, "f3": {"type": "noul", "instructions": []},
                        "f4": {"type": "noul", "instructions": {}}, "f5": {"type": "noul", "instructions": ""}})"),
      // Ids of any text (the reference limits): letters beyond ASCII, spaces, quotes, a newline, an emoji.
      question_body(R"({"ä Ω": {"type": "choice", "criteria": {"ä": "a umlaut", "Ω": null, "z": "zed", "日本": null,
                                                             "😀": "grin", "a b": null, "q\"uote": "x", "": "empty"}},
                        "line\nbreak": {"type": "noul", "instructions": "Two lines?"}})"),
      question_body(R"({"one": {"type": "choice", "criteria": {"only": "the one"}},
                        "lvl": {"type": "score", "criteria": ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10"]},
                        "single": {"type": "score", "criteria": ["just"]}})",
                    R"({"ticket": 7, "tags": ["x", "ä"]})"),
      // The empty question id with nothing else to show: an empty span, refused by both.
      question_body(R"({"": {"type": "noul"}})"),
      question_body(R"({"": {"type": "noul", "instructions": "Given instead"}})"),
  };
  std::string many = "{";
  for (int i = 0; i < 70; ++i)
    many += (i ? ", " : "") + std::string("\"q") + std::to_string(i) + R"(": {"type": "noul"})";
  bodies.push_back(question_body(many + "}"));
  return bodies;
}

// Python's answer for every body, in order: {"pieces": [...], "questions": [...]} or {"refused": code}.
std::vector<nlohmann::json> python_prompts(const std::vector<std::string>& bodies) {
  const std::string input = std::filesystem::temp_directory_path() / ("duet-prompt-" + std::to_string(getpid()));
  {
    std::ofstream out(input, std::ios::binary);
    // One body a line, the same text (JSON strings hold no raw newline, so the ones between tokens can go).
    for (std::string body : bodies) {
      std::replace(body.begin(), body.end(), '\n', ' ');
      out << body << "\n";
    }
  }
  const duet::testing::CommandResult python = duet::testing::run_command(
      "/usr/bin/python3 '" + duet::testing::tests_path("../tools/decision_prompt.py") + "' < '" + input + "'");
  std::filesystem::remove(input);
  EXPECT_EQ(python.status, 0) << python.output;
  std::vector<nlohmann::json> out;
  std::istringstream lines(python.output);
  for (std::string line; std::getline(lines, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

TEST(DecisionPromptReference, DuetsEncoderEqualsThePythonReference) {
  const auto demo = tokenizer::Tokenizer::load_dir(duet::testing::demo_dir());
  std::vector<std::string> bodies;
  for (const auto& golden : decision_goldens("demo").at("cases")) bodies.push_back(golden.at("body"));
  const size_t goldens = bodies.size();
  for (std::string& body : extra_bodies()) bodies.push_back(std::move(body));
  const std::vector<nlohmann::json> python = python_prompts(bodies);
  ASSERT_EQ(python.size(), bodies.size());
  int compared = 0, refused = 0;
  for (size_t i = 0; i < bodies.size(); ++i) {
    SCOPED_TRACE(i < goldens ? "golden " + std::to_string(i) : "extra " + std::to_string(i - goldens));
    const Json body = parse_decision_body(bodies[i]);
    // Truncation is the budget's business (encoder_test.cc); here the whole prompt.
    const DecisionRequest request = validate_decision_request(body, DecisionLimits::reference);
    const nlohmann::json& want = python[i];
    if (want.contains("refused")) {
      try {
        encode_decision(*demo, request, std::numeric_limits<int32_t>::max());
        ADD_FAILURE() << "accepted; Python refused it: " << want.dump();
      } catch (const DecisionError& error) {
        EXPECT_EQ(error.code(), want.at("refused").get<std::string>());
      }
      ++refused;
      continue;
    }
    const Encoding got = encode_decision(*demo, request, std::numeric_limits<int32_t>::max());
    // Python's pieces, tokenized one by one: the ids, and where each piece starts in them.
    std::vector<int32_t> ids;
    std::vector<int32_t> starts;
    for (const auto& piece : want.at("pieces")) {
      starts.push_back(static_cast<int32_t>(ids.size()));
      const std::vector<int32_t> piece_ids = demo->encode(piece.get<std::string>());
      ids.insert(ids.end(), piece_ids.begin(), piece_ids.end());
    }
    starts.push_back(static_cast<int32_t>(ids.size()));
    const auto span = [&](const nlohmann::json& pieces) {
      return std::vector<int32_t>{starts.at(pieces.at(0).get<size_t>()), starts.at(pieces.at(1).get<size_t>())};
    };
    EXPECT_EQ(got.ids, ids);
    ASSERT_EQ(got.questions.size(), want.at("questions").size());
    for (size_t q = 0; q < got.questions.size(); ++q) {
      const nlohmann::json& question = want.at("questions")[q];
      EXPECT_EQ((std::vector<int32_t>{got.questions[q].span.begin, got.questions[q].span.end}),
                span(question.at("span")))
          << "question " << q;
      ASSERT_EQ(got.questions[q].options.size(), question.at("options").size());
      for (size_t o = 0; o < got.questions[q].options.size(); ++o)
        EXPECT_EQ((std::vector<int32_t>{got.questions[q].options[o].begin, got.questions[q].options[o].end}),
                  span(question.at("options")[o]))
            << "question " << q << " option " << o;
    }
    ++compared;
  }
  EXPECT_GE(compared, 60);
  EXPECT_GE(refused, 1);
}

}  // namespace
}  // namespace duet::decision
