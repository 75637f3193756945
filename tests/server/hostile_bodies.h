#pragma once
// A deterministic generator of malformed and hostile request bodies for the fuzz test: body i of a route is a
// function of (route seed, i) only. Starts from a valid body and truncates it, swaps types, plants huge
// numbers, nests deeply, breaks UTF-8, adds unknown fields, or replaces it with random bytes.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

namespace duet::testing {

struct HostileBody {
  std::string body;
  std::string content_type;  // empty: no Content-Type header
  std::string kind;          // which mutation made it (for failure messages)
};

class HostileBodies {
 public:
  explicit HostileBodies(std::vector<nlohmann::json> valid) : valid_(std::move(valid)) {}

  HostileBody make(uint64_t route_seed, uint64_t index) const {
    std::mt19937_64 rng(route_seed * 1000003u + index);
    nlohmann::json base = valid_[rng() % valid_.size()];
    HostileBody out;
    out.content_type = content_type(rng);
    switch (rng() % 11) {
      case 0:
        out.kind = "truncated";
        out.body = truncate(base.dump(), rng);
        break;
      case 1:
        out.kind = "type swap";
        swap_types(base, rng);
        out.body = base.dump();
        break;
      case 2:
        out.kind = "huge number";
        out.body = plant_number(base, rng);
        break;
      case 3:
        out.kind = "deep nesting";
        out.body = nest(base, rng);
        break;
      case 4:
        out.kind = "invalid utf-8";
        out.body = break_utf8(base.dump(), rng);
        break;
      case 5:
        out.kind = "random bytes";
        out.body = random_bytes(rng);
        break;
      case 6:
        out.kind = "byte flips";
        out.body = flip_bytes(base.dump(), rng);
        break;
      case 7:
        out.kind = "unknown field";
        base[random_key(rng)] = random_value(rng, 2);
        out.body = base.dump();
        break;
      case 8:
        out.kind = "not an object";
        out.body = random_value(rng, 3).dump();
        break;
      case 9:
        out.kind = "dropped field";
        drop_field(base, rng);
        out.body = base.dump();
        break;
      default:
        out.kind = "nested type swap";
        swap_nested(base, rng);
        out.body = base.dump();
        break;
    }
    return out;
  }

 private:
  using Rng = std::mt19937_64;

  static std::string content_type(Rng& rng) {
    static const char* const kTypes[] = {"application/json",
                                         "application/json",
                                         "application/json",
                                         "text/plain",
                                         "",
                                         "application/x-www-form-urlencoded",
                                         "multipart/form-data; boundary=x",
                                         "application/json; charset=latin1"};
    return kTypes[rng() % std::size(kTypes)];
  }

  static std::string truncate(const std::string& text, Rng& rng) { return text.substr(0, rng() % text.size()); }

  static std::string random_key(Rng& rng) {
    static const char* const kKeys[] = {"functions",        "audio",   "x",    "",       "prompt_logprobs", "__proto__",
                                        "../../etc/passwd", "best_of", "echo", "suffix", "guided_json"};
    return kKeys[rng() % std::size(kKeys)];
  }

  static nlohmann::json random_value(Rng& rng, int depth) {
    switch (rng() % (depth > 0 ? 12 : 9)) {
      case 0:
        return nullptr;
      case 1:
        return rng() % 2 == 0;
      case 2:
        return static_cast<int64_t>(rng());
      case 3:
        return static_cast<uint64_t>(rng());
      case 4:
        return -static_cast<double>(rng() % 1000) / 7.0;
      case 5:
        return 1e308;
      case 6:
        return std::string(rng() % 40, static_cast<char>('a' + rng() % 26));
      case 7:
        return "";
      case 8:
        return static_cast<int64_t>(rng() % 5) - 1;
      case 9: {
        auto array = nlohmann::json::array();
        for (size_t i = rng() % 4; i > 0; --i) array.push_back(random_value(rng, depth - 1));
        return array;
      }
      case 10: {
        auto object = nlohmann::json::object();
        for (size_t i = rng() % 4; i > 0; --i) object[random_key(rng)] = random_value(rng, depth - 1);
        return object;
      }
      default:
        return std::string("<tool_call>\n<function=x>\n</function>");
    }
  }

  static void swap_types(nlohmann::json& body, Rng& rng) {
    if (body.empty()) return;
    auto it = body.begin();
    std::advance(it, static_cast<long>(rng() % body.size()));
    *it = random_value(rng, 2);
  }

  // Somewhere one level down (a message, a tool, a prompt element) gets a value of another type.
  static void swap_nested(nlohmann::json& body, Rng& rng) {
    for (auto& [key, value] : body.items()) {
      if (value.is_array() && !value.empty()) {
        value[rng() % value.size()] = random_value(rng, 2);
        return;
      }
      if (value.is_object() && !value.empty()) {
        swap_types(value, rng);
        return;
      }
    }
    swap_types(body, rng);
  }

  static void drop_field(nlohmann::json& body, Rng& rng) {
    if (body.empty()) return;
    auto it = body.begin();
    std::advance(it, static_cast<long>(rng() % body.size()));
    body.erase(it);
  }

  static std::string plant_number(const nlohmann::json& body, Rng& rng) {
    static const std::string kNumbers[] = {"1e999",
                                           "-1e999",
                                           "18446744073709551616",
                                           "-9223372036854775809",
                                           "99999999999999999999999999999",
                                           "1e-999",
                                           "-0",
                                           "0.0000000001",
                                           "2147483648",
                                           "-2147483649",
                                           "4.9e-324",
                                           "1" + std::string(400, '0')};
    std::string number = kNumbers[rng() % std::size(kNumbers)];
    if (body.empty()) return "{\"max_tokens\": " + number + "}";
    auto it = body.begin();
    std::advance(it, static_cast<long>(rng() % body.size()));
    nlohmann::json copy = body;
    copy[it.key()] = "@@NUMBER@@";
    std::string text = copy.dump();
    text.replace(text.find("\"@@NUMBER@@\""), 12, number);
    return text;
  }

  static std::string nest(const nlohmann::json& body, Rng& rng) {
    size_t depth = 1 + rng() % 5000;
    bool arrays = rng() % 2 == 0;
    std::string open, close;
    for (size_t i = 0; i < depth; ++i) {
      open += arrays ? "[" : "{\"a\":";
      close += arrays ? "]" : "}";
    }
    std::string text = body.dump();
    // Put the nest inside the body when it has a field, so only the depth is wrong.
    if (!body.empty()) {
      size_t colon = text.find(':');
      return text.substr(0, colon + 1) + open + "1" + close + "," + text.substr(colon + 1);
    }
    return open + "1" + close;
  }

  static std::string break_utf8(std::string text, Rng& rng) {
    static const char* const kBad[] = {"\xff", "\xc0\xaf", "\xed\xa0\x80",   "\xe4\xb8", "\xf4\x90\x80\x80",
                                       "\x80", "\\ud800",  "\\udfff\\ud800", "\x00"};
    size_t at = text.find('"', rng() % text.size());
    if (at == std::string::npos) at = text.size() / 2;
    const char* bad = kBad[rng() % std::size(kBad)];
    text.insert(at + 1, std::string(bad, bad[0] == 0 ? 1 : std::strlen(bad)));
    return text;
  }

  static std::string random_bytes(Rng& rng) {
    std::string text(rng() % 512, '\0');
    for (auto& c : text) c = static_cast<char>(rng());
    return text;
  }

  static std::string flip_bytes(std::string text, Rng& rng) {
    for (size_t n = 1 + rng() % 4; n > 0 && !text.empty(); --n) text[rng() % text.size()] = static_cast<char>(rng());
    return text;
  }

  std::vector<nlohmann::json> valid_;
};

}  // namespace duet::testing
