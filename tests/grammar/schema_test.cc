// The schema compiler against the corpus: every example's verdict comes from ajv, and the grammar must accept the
// documents ajv accepts in duet's compact form, and reject the ones ajv rejects. Keywords duet cannot honour are
// refused with their schema path.
#include <gtest/gtest.h>

#include <algorithm>

#include "corpus.h"
#include "grammar/grammar_cache.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"

namespace duet::testing {
namespace {

// One token per byte: the grammar alone, no vocabulary effects.
std::shared_ptr<const grammar::Vocabulary> byte_vocabulary() {
  std::vector<std::pair<int32_t, std::string>> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(b, std::string(1, static_cast<char>(b)));
  return std::make_shared<const grammar::Vocabulary>(std::move(tokens), 256);
}

bool grammar_accepts(const std::shared_ptr<const grammar::CompiledGrammar>& g, const std::string& doc) {
  grammar::Matcher m(g);
  return m.accept_bytes(doc) && m.can_end();
}

TEST(GrammarSchema, CorpusExamplesAgreeWithAjv) {
  const auto corpus = load_corpus();
  ASSERT_GE(corpus.size(), 40u);
  std::vector<std::pair<OrderedJson, std::string>> cases;
  std::vector<bool> expected;
  std::vector<std::string> what;
  for (const auto& e : corpus) {
    for (const auto& d : e.valid)
      cases.emplace_back(e.schema, d), expected.push_back(true), what.push_back(e.name + " " + d);
    for (const auto& d : e.invalid)
      cases.emplace_back(e.schema, d), expected.push_back(false), what.push_back(e.name + " " + d);
    for (const auto& d : e.unwritten)
      cases.emplace_back(e.schema, d), expected.push_back(true), what.push_back(e.name + " " + d);
  }
  const auto verdicts = ajv_validate(cases);
  ASSERT_EQ(verdicts.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i)
    EXPECT_EQ(verdicts[i].valid, expected[i]) << what[i] << ": " << verdicts[i].error;
}

TEST(GrammarSchema, AcceptsValidAndRejectsInvalidExamples) {
  grammar::GrammarCache cache(byte_vocabulary());
  int checked = 0;
  for (const auto& e : load_corpus()) {
    SCOPED_TRACE(e.name);
    const auto g = cache.for_schema(e.schema, {});
    for (const auto& d : e.valid) EXPECT_TRUE(grammar_accepts(g, d)) << d;
    for (const auto& d : e.invalid) EXPECT_FALSE(grammar_accepts(g, d)) << d;
    for (const auto& d : e.unwritten) EXPECT_FALSE(grammar_accepts(g, d)) << "not compact form: " << d;
    checked += static_cast<int>(e.valid.size() + e.invalid.size() + e.unwritten.size());
  }
  EXPECT_GE(checked, 150);
}

// Planted control: a grammar that admits everything must fail the check above on the invalid examples.
TEST(GrammarSchema, PlantedPermissiveGrammarIsCaught) {
  grammar::GrammarCache cache(byte_vocabulary());
  const auto any = cache.for_schema(OrderedJson::parse(R"({"type":"object"})"), {});
  EXPECT_TRUE(grammar_accepts(any, R"({"name":"Ann"})"));  // object_required rejects this one
  const auto corpus = load_corpus();
  const auto entry =
      std::find_if(corpus.begin(), corpus.end(), [](const auto& e) { return e.name == "object_required"; });
  ASSERT_NE(entry, corpus.end());
  const auto strict = cache.for_schema(entry->schema, {});
  EXPECT_FALSE(grammar_accepts(strict, R"({"name":"Ann"})"));
}

struct Refusal {
  const char* schema;
  const char* path;
  const char* keyword;
};

TEST(GrammarSchema, UnsupportedKeywordsAreRefusedByPath) {
  const Refusal refusals[] = {
      {R"({"type":"object","properties":{"a":{"type":"string","not":{"const":"x"}}}})", "/properties/a", "not"},
      {R"({"type":"array","items":{"type":"integer"},"uniqueItems":true})", "", "uniqueItems"},
      {R"({"type":"object","patternProperties":{"^x":{}}})", "", "patternProperties"},
      {R"({"type":"number","multipleOf":0.5})", "", "multipleOf"},
      {R"({"$defs":{"a":{"type":"string","format":"hostname"}},"$ref":"#/$defs/a"})", "/$defs/a", "format"},
      {R"({"type":"object","properties":{"x":{"if":{},"then":{}}}})", "/properties/x", "if"},
      {R"({"type":"string","pattern":"^(?=a)b$"})", "/pattern", "lookaround"},
      {R"({"type":"string","pattern":"(a)\\1"})", "/pattern", "backreference"},
  };
  for (const Refusal& r : refusals) {
    SCOPED_TRACE(r.schema);
    try {
      grammar::grammar_from_schema(OrderedJson::parse(r.schema));
      ADD_FAILURE() << "not refused";
    } catch (const grammar::SchemaError& e) {
      EXPECT_EQ(e.path(), r.path) << e.what();
      EXPECT_NE(std::string(e.what()).find(r.keyword), std::string::npos) << e.what();
    }
  }
}

TEST(GrammarSchema, NonStrictIgnoresAndListsWhatItCannotHonour) {
  const auto out = grammar::grammar_from_schema(
      OrderedJson::parse(R"({"type":"object","properties":{"a":{"type":"string","not":{}}},"required":["a"]})"),
      {.strict = false});
  ASSERT_EQ(out.ignored.size(), 1u);
  EXPECT_EQ(out.ignored[0], "/properties/a: not");
}

TEST(GrammarSchema, CacheHitsBySchemaText) {
  grammar::GrammarCache cache(byte_vocabulary());
  const auto schema = OrderedJson::parse(R"({"type":"object","properties":{"a":{"type":"integer"}}})");
  const auto first = cache.for_schema(schema, {});
  const auto second = cache.for_schema(schema, {});
  EXPECT_EQ(first.get(), second.get());
  EXPECT_EQ(cache.hits(), 1u);
  // Key order is part of the text: the property order it writes differs.
  const auto reordered =
      cache.for_schema(OrderedJson::parse(R"({"properties":{"a":{"type":"integer"}},"type":"object"})"), {});
  EXPECT_NE(first.get(), reordered.get());
  EXPECT_NE(cache.for_schema(schema, {.strict = false}).get(), first.get());
}

TEST(GrammarSchema, AnyObjectMode) {
  grammar::GrammarCache cache(byte_vocabulary());
  const auto g = cache.for_any_object();
  EXPECT_TRUE(grammar_accepts(g, R"({"a":[1,{"b":null}],"c":"d"})"));
  EXPECT_TRUE(grammar_accepts(g, "{}"));
  EXPECT_FALSE(grammar_accepts(g, "[1]"));
  EXPECT_FALSE(grammar_accepts(g, R"({"a":1} )"));
}

}  // namespace
}  // namespace duet::testing
