// Random walks through every corpus schema on the demo model's vocabulary: every mask is compared with the one-token
// check for every id, and every finished document is validated by ajv.
#include "walk.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "corpus.h"
#include "grammar/grammar_cache.h"

namespace duet::testing {
namespace {

TEST(GrammarWalk, DemoVocabularyDocumentsValidateAndMasksAreExact) {
  const auto tok = demo_tokenizer();
  grammar::GrammarCache cache(grammar::Vocabulary::from_tokenizer(*tok, tok->vocab_size()));
  std::vector<std::pair<OrderedJson, std::string>> docs;
  std::vector<std::string> names;
  int walks = 0, finished = 0;
  for (const auto& e : load_corpus()) {
    const auto g = cache.for_schema(e.schema, {});
    for (uint32_t seed = 1; seed <= 3; ++seed) {
      SCOPED_TRACE(e.name + " seed " + std::to_string(seed));
      const WalkResult w = random_walk(g, seed, 400, 1);
      ++walks;
      if (!w.finished) continue;
      ++finished;
      docs.emplace_back(e.schema, w.document);
      names.push_back(e.name + ": " + w.document);
    }
  }
  // The json_object mode too.
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    const WalkResult w = random_walk(cache.for_any_object(), seed, 400, 1);
    ++walks;
    if (w.finished)
      ++finished, docs.emplace_back(OrderedJson::parse(R"({"type":"object"})"), w.document),
          names.push_back(w.document);
  }
  EXPECT_GE(finished, walks * 9 / 10) << "too many walks hit the step limit";
  const auto verdicts = ajv_validate(docs);
  ASSERT_EQ(verdicts.size(), docs.size());
  int valid = 0;
  for (size_t i = 0; i < docs.size(); ++i) {
    EXPECT_TRUE(verdicts[i].valid) << names[i] << ": " << verdicts[i].error;
    valid += verdicts[i].valid;
  }
  std::cout << valid << " of " << docs.size() << " documents valid (" << walks << " walks)\n";
}

// Planted control for the mask check: one extra allowed id, or one missing, must be reported.
TEST(GrammarWalk, PlantedMaskErrorsAreCaught) {
  const auto tok = demo_tokenizer();
  grammar::GrammarCache cache(grammar::Vocabulary::from_tokenizer(*tok, tok->vocab_size()));
  grammar::Matcher m(cache.for_schema(
      OrderedJson::parse(R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})"), {}));
  ASSERT_TRUE(m.accept_bytes("{\"a\":"));
  std::vector<uint32_t> mask(static_cast<size_t>(m.compiled().vocabulary().words()));
  m.fill_mask(mask);
  ASSERT_TRUE(mask_mismatches(m, mask).empty());
  const auto quote = tok->token_to_id("\"");
  ASSERT_TRUE(quote.has_value());
  ASSERT_FALSE(grammar::test_bit(mask, *quote));  // a string where an integer must come
  auto planted = mask;
  grammar::set_bit(planted, *quote);
  EXPECT_EQ(mask_mismatches(m, planted), std::vector<int32_t>{*quote});
  const auto one = tok->token_to_id("1");
  ASSERT_TRUE(one.has_value() && grammar::test_bit(mask, *one));
  planted = mask;
  planted[static_cast<size_t>(*one) / 32] &= ~(1u << (*one % 32));
  EXPECT_EQ(mask_mismatches(m, planted), std::vector<int32_t>{*one});
}

// Planted control for the validator: a walk's document with its last byte dropped must not validate.
TEST(GrammarWalk, PlantedBrokenDocumentIsRejectedByAjvAndTheGrammar) {
  const auto tok = demo_tokenizer();
  grammar::GrammarCache cache(grammar::Vocabulary::from_tokenizer(*tok, tok->vocab_size()));
  const auto schema = OrderedJson::parse(
      R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}}},"required":["a"],"additionalProperties":false})");
  const auto g = cache.for_schema(schema, {});
  const WalkResult w = random_walk(g, 7, 400, 0);
  ASSERT_TRUE(w.finished);
  const std::string broken = w.document.substr(0, w.document.size() - 1);
  const auto verdicts = ajv_validate({{schema, w.document}, {schema, broken}});
  ASSERT_EQ(verdicts.size(), 2u);
  EXPECT_TRUE(verdicts[0].valid);
  EXPECT_FALSE(verdicts[1].valid);
  grammar::Matcher m(g);
  EXPECT_TRUE(m.accept_bytes(broken));
  EXPECT_FALSE(m.can_end());
}

}  // namespace
}  // namespace duet::testing

namespace duet::testing {
namespace {

int env_int(const char* name, int otherwise) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::atoi(v) : otherwise;
}

// The generated corpus (generate_schemas.py) with the hand-written one: one walk per schema in CI; the receipt in
// docs/benchmarks.md runs DUET_CORPUS_SEEDS=5 DUET_CORPUS_CHECK_EVERY=1 (every mask against the one-token check).
TEST(GrammarWalk, GeneratedCorpusDocumentsValidate) {
  const auto tok = demo_tokenizer();
  grammar::GrammarCache cache(grammar::Vocabulary::from_tokenizer(*tok, tok->vocab_size()));
  auto corpus = load_corpus("schemas_generated.jsonl");
  const auto written = load_corpus();
  corpus.insert(corpus.end(), written.begin(), written.end());
  ASSERT_GE(corpus.size(), 300u);
  const int seeds = env_int("DUET_CORPUS_SEEDS", 1), check_every = env_int("DUET_CORPUS_CHECK_EVERY", 0);
  std::vector<std::pair<OrderedJson, std::string>> docs;
  std::vector<std::string> names;
  int walks = 0;
  for (const auto& e : corpus) {
    SCOPED_TRACE(e.name);
    std::shared_ptr<const grammar::CompiledGrammar> g;
    try {
      g = cache.for_schema(e.schema, {});
    } catch (const std::exception& ex) {
      ADD_FAILURE() << e.name << " does not compile: " << ex.what();
      continue;
    }
    for (uint32_t seed = 1; seed <= static_cast<uint32_t>(seeds); ++seed) {
      const WalkResult w = random_walk(g, seed, 600, check_every);
      ++walks;
      if (!w.finished) continue;
      docs.emplace_back(e.schema, w.document);
      names.push_back(e.name + " seed " + std::to_string(seed) + ": " + w.document);
    }
  }
  EXPECT_GE(docs.size(), static_cast<size_t>(walks) * 9 / 10) << "too many walks hit the step limit";
  const auto verdicts = ajv_validate(docs);
  ASSERT_EQ(verdicts.size(), docs.size());
  int valid = 0;
  for (size_t i = 0; i < docs.size(); ++i) {
    EXPECT_TRUE(verdicts[i].valid) << names[i] << ": " << verdicts[i].error;
    valid += verdicts[i].valid;
  }
  std::cout << corpus.size() << " schemas, " << walks << " walks, " << valid << " of " << docs.size()
            << " documents valid\n";
}

}  // namespace
}  // namespace duet::testing
