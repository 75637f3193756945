// Reads tokenizer.json and tokenizer_config.json into a BpeTokenizer. Every field that changes how text is
// tokenized is either implemented exactly or refused here, by name; nothing is silently ignored.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/byte_level.h"

namespace duet::tokenizer {
namespace {

using nlohmann::json;

std::string type_of(const json& j, const std::string& where, const std::string& origin) {
  if (!j.is_object()) fail("{}: {} must be an object", origin, where);
  auto it = j.find("type");
  if (it == j.end() || !it->is_string()) fail("{}: {} has no \"type\"", origin, where);
  return it->get<std::string>();
}

bool flag(const json& j, const char* key, bool fallback, const std::string& where, const std::string& origin) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) fail("{}: {}.{} must be true or false", origin, where, key);
  return it->get<bool>();
}

// A field that must be absent, null, or one of the harmless values (false, "", 0).
void require_unset(const json& j, const char* key, const std::string& where, const std::string& origin) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return;
  if ((it->is_boolean() && !it->get<bool>()) || (it->is_string() && it->get<std::string>().empty()) ||
      (it->is_number() && it->get<double>() == 0.0)) {
    return;
  }
  fail("{}: {}.{} = {} is not supported (duet implements byte-level BPE without it)", origin, where, key, it->dump());
}

// PCRE2 pattern matching `literal` exactly (a Split pattern given as {"String": ...}).
std::string escape_literal(const std::string& literal) {
  std::string out;
  for (char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

void read_model(const json& model, TokenizerParts& parts, std::vector<std::array<int32_t, 3>>& merges,
                bool& ignore_merges, const std::string& origin) {
  if (!model.is_object()) fail("{}: \"model\" is missing or not an object", origin);
  if (auto it = model.find("type"); it != model.end()) {
    if (!it->is_string() || it->get<std::string>() != "BPE") {
      fail("{}: model.type {} is not supported (duet supports byte-level BPE)", origin, it->dump());
    }
  } else if (!model.contains("merges")) {
    fail("{}: model has no \"type\" and no merges: only BPE is supported", origin);
  }
  for (const char* key : {"dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix", "byte_fallback"}) {
    require_unset(model, key, "model", origin);
  }
  ignore_merges = flag(model, "ignore_merges", false, "model", origin);

  auto vit = model.find("vocab");
  if (vit == model.end() || !vit->is_object()) fail("{}: model.vocab is missing or not an object", origin);
  int64_t max_id = -1;
  for (auto& [token, id] : vit->items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > 0x7FFFFFF0) {
      fail("{}: model.vocab[{:?}] = {} is not a valid id", origin, token, id.dump());
    }
    max_id = std::max(max_id, id.get<int64_t>());
  }
  parts.tokens.assign(size_t(max_id + 1), {});
  parts.exists.assign(size_t(max_id + 1), false);
  parts.vocab.reserve(vit->size());
  for (auto& [token, id_json] : vit->items()) {
    const auto id = size_t(id_json.get<int64_t>());
    if (parts.exists[id]) {
      fail("{}: model.vocab: id {} is given to both {:?} and {:?}", origin, id, parts.tokens[id], token);
    }
    parts.exists[id] = true;
    parts.tokens[id] = token;
    parts.vocab.emplace(token, int32_t(id));
  }

  auto mit = model.find("merges");
  if (mit == model.end() || mit->is_null()) fail("{}: model.merges is missing", origin);
  if (!mit->is_array()) fail("{}: model.merges must be a list", origin);
  merges.reserve(mit->size());
  auto lookup = [&](const std::string& token, size_t k) {
    auto it = parts.vocab.find(token);
    if (it == parts.vocab.end()) fail("{}: model.merges[{}]: {:?} is not in the vocabulary", origin, k, token);
    return it->second;
  };
  for (size_t k = 0; k < mit->size(); ++k) {
    const json& m = (*mit)[k];
    std::string left, right;
    if (m.is_string()) {  // the older format: "left right"
      const std::string& s = m.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        fail("{}: model.merges[{}] = {:?} is not two tokens separated by one space", origin, k, s);
      }
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {  // ["left", "right"]
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      fail("{}: model.merges[{}] = {} is neither \"a b\" nor [\"a\", \"b\"]", origin, k, m.dump());
    }
    merges.push_back({lookup(left, k), lookup(right, k), lookup(left + right, k)});
  }
}

// An added token from its entry `t` in tokenizer.json's added_tokens or tokenizer_config.json's added_tokens_decoder:
// the caller has checked id and content; the flags take HF's defaults (normalized unless special).
AddedToken added_token(int32_t id, std::string content, const json& t, const std::string& where,
                       const std::string& origin) {
  AddedToken a;
  a.id = id;
  a.content = std::move(content);
  a.special = flag(t, "special", false, where, origin);
  a.normalized = flag(t, "normalized", !a.special, where, origin);
  a.lstrip = flag(t, "lstrip", false, where, origin);
  a.rstrip = flag(t, "rstrip", false, where, origin);
  a.single_word = flag(t, "single_word", false, where, origin);
  return a;
}

void read_added_tokens(const json& root, TokenizerParts& parts, const std::string& origin) {
  auto it = root.find("added_tokens");
  if (it == root.end() || it->is_null()) return;
  if (!it->is_array()) fail("{}: added_tokens must be a list", origin);
  for (size_t k = 0; k < it->size(); ++k) {
    const json& t = (*it)[k];
    const std::string where = fmt::format("added_tokens[{}]", k);
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() || !t.contains("content") ||
        !t["content"].is_string()) {
      fail("{}: {} needs an integer \"id\" and a string \"content\"", origin, where);
    }
    const int64_t id = t["id"].get<int64_t>();
    if (id < 0 || id > 0x7FFFFFF0) fail("{}: {}.id {} is out of range", origin, where, id);
    parts.added.push_back(added_token(int32_t(id), t["content"].get<std::string>(), t, where, origin));
  }
}

void read_normalizer(const json& n, TokenizerParts& parts, const std::string& origin) {
  if (n.is_null()) return;
  const std::string type = type_of(n, "normalizer", origin);
  if (type == "NFC") {
    parts.normalizer = Normalizer(Normalizer::Kind::kNfc);
  } else if (type == "Sequence") {
    auto it = n.find("normalizers");
    if (it == n.end() || !it->is_array()) fail("{}: normalizer Sequence has no \"normalizers\" list", origin);
    for (const json& inner : *it) read_normalizer(inner, parts, origin);  // NFC twice is NFC
  } else {
    fail("{}: normalizer type {:?} is not supported (duet supports NFC or none)", origin, type);
  }
}

void read_pre_tokenizer(const json& p, TokenizerParts& parts, bool& byte_level, const std::string& origin) {
  if (p.is_null()) return;
  const std::string type = type_of(p, "pre_tokenizer", origin);
  if (byte_level) fail("{}: pre_tokenizer {:?} after ByteLevel is not supported", origin, type);
  if (type == "Sequence") {
    auto it = p.find("pretokenizers");
    if (it == p.end() || !it->is_array()) fail("{}: pre_tokenizer Sequence has no \"pretokenizers\" list", origin);
    for (const json& inner : *it) read_pre_tokenizer(inner, parts, byte_level, origin);
  } else if (type == "Split") {
    auto pat = p.find("pattern");
    std::string regex;
    if (pat != p.end() && pat->is_object() && pat->contains("Regex") && (*pat)["Regex"].is_string()) {
      regex = (*pat)["Regex"].get<std::string>();
    } else if (pat != p.end() && pat->is_object() && pat->contains("String") && (*pat)["String"].is_string()) {
      regex = escape_literal((*pat)["String"].get<std::string>());
    } else {
      fail("{}: pre_tokenizer Split needs a pattern {{\"Regex\": ...}} or {{\"String\": ...}}", origin);
    }
    const std::string behavior = p.value("behavior", std::string("Isolated"));
    RegexSplitter::Behavior b;
    if (behavior == "Isolated")
      b = RegexSplitter::Behavior::kIsolated;
    else if (behavior == "Removed")
      b = RegexSplitter::Behavior::kRemoved;
    else
      fail("{}: pre_tokenizer Split behavior {:?} is not supported (Isolated, Removed)", origin, behavior);
    if (flag(p, "invert", false, "pre_tokenizer Split", origin)) {
      fail("{}: pre_tokenizer Split invert = true is not supported", origin);
    }
    parts.pre_tokenizer.add(RegexSplitter(regex, b));
  } else if (type == "ByteLevel") {
    if (flag(p, "add_prefix_space", false, "pre_tokenizer ByteLevel", origin)) {
      fail("{}: pre_tokenizer ByteLevel add_prefix_space = true is not supported", origin);
    }
    if (flag(p, "use_regex", true, "pre_tokenizer ByteLevel", origin)) {
      parts.pre_tokenizer.add(RegexSplitter(kGpt2Pattern, RegexSplitter::Behavior::kIsolated));
    }
    byte_level = true;
  } else {
    fail("{}: pre_tokenizer type {:?} is not supported (duet supports Split, ByteLevel, Sequence)", origin, type);
  }
}

void read_post_processor(const json& p, const std::string& origin) {
  if (p.is_null()) return;
  const std::string type = type_of(p, "post_processor", origin);
  if (type == "ByteLevel") return;  // only adjusts offsets
  if (type == "Sequence" && p.contains("processors") && p["processors"].is_array()) {
    for (const json& inner : p["processors"]) read_post_processor(inner, origin);
    return;
  }
  fail("{}: post_processor type {:?} is not supported (it adds tokens; duet encodes without them)", origin, type);
}

std::optional<int32_t> config_token(const json& config, const char* key, const BpeTokenizer& tok,
                                    const std::string& origin) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  std::string content;
  if (it->is_string())
    content = it->get<std::string>();
  else if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    content = (*it)["content"];
  else
    fail("{}: {} must be a string or {{\"content\": ...}}", origin, key);
  auto id = tok.token_to_id(content);
  if (!id) fail("{}: {} {:?} is not a token of tokenizer.json", origin, key, content);
  return id;
}

// tokenizer_config.json's added_tokens_decoder: transformers adds any token missing from tokenizer.json.
void merge_config_added_tokens(const json& config, TokenizerParts& parts, const std::string& origin) {
  auto it = config.find("added_tokens_decoder");
  if (it == config.end() || it->is_null()) return;
  if (!it->is_object()) fail("{}: added_tokens_decoder must be an object", origin);
  for (auto& [key, t] : it->items()) {
    int64_t id = -1;
    try {
      size_t used = 0;
      id = std::stoll(key, &used);
      if (used != key.size()) id = -1;
    } catch (const std::exception&) {
    }
    if (id < 0 || id > 0x7FFFFFF0 || !t.is_object() || !t.contains("content") || !t["content"].is_string()) {
      fail("{}: added_tokens_decoder[{:?}] needs an integer id and a string content", origin, key);
    }
    const std::string content = t["content"];
    bool known = false;
    for (const AddedToken& a : parts.added) {
      if (a.id != id) continue;
      if (a.content != content) {
        fail("{}: added_tokens_decoder gives id {} to {:?}, tokenizer.json to {:?}", origin, id, content, a.content);
      }
      known = true;
    }
    if (known) continue;
    parts.added.push_back(added_token(int32_t(id), content, t, "added_tokens_decoder[" + key + "]", origin));
  }
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("tokenizer: cannot open {}", path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

json parse(std::string_view text, const std::string& origin) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", origin, e.what());
  }
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::load_json(std::string_view tokenizer_json, std::string_view tokenizer_config_json,
                                                const std::string& origin) {
  const json root = parse(tokenizer_json, origin);
  if (!root.is_object()) fail("{}: the top level must be an object", origin);
  const std::string config_origin = origin.size() >= 14 && origin.ends_with("tokenizer.json")
                                        ? origin.substr(0, origin.size() - 14) + "tokenizer_config.json"
                                        : "tokenizer_config.json";
  const json config = tokenizer_config_json.empty() ? json::object() : parse(tokenizer_config_json, config_origin);
  if (!config.is_object()) fail("{}: the top level must be an object", config_origin);

  for (const char* key : {"truncation", "padding"}) {
    if (root.contains(key) && !root[key].is_null()) {
      fail("{}: {} is set; duet never truncates or pads, remove it", origin, key);
    }
  }
  TokenizerParts parts;
  std::vector<std::array<int32_t, 3>> merges;
  bool ignore_merges = false;
  read_model(root.contains("model") ? root["model"] : json(), parts, merges, ignore_merges, origin);
  read_added_tokens(root, parts, origin);
  merge_config_added_tokens(config, parts, config_origin);
  read_normalizer(root.value("normalizer", json()), parts, origin);
  bool byte_level = false;
  read_pre_tokenizer(root.value("pre_tokenizer", json()), parts, byte_level, origin);
  if (!byte_level) fail("{}: pre_tokenizer has no ByteLevel step: duet supports byte-level BPE only", origin);
  read_post_processor(root.value("post_processor", json()), origin);
  const json decoder = root.value("decoder", json());
  if (decoder.is_null() || type_of(decoder, "decoder", origin) != "ByteLevel") {
    fail("{}: decoder {} is not supported (duet decodes ByteLevel)", origin, decoder.dump());
  }

  // Ids: the vocabulary's, then added tokens (which win for decoding when they share an id).
  int32_t max_id = int32_t(parts.tokens.size()) - 1;
  for (const AddedToken& a : parts.added) max_id = std::max(max_id, a.id);
  parts.tokens.resize(size_t(max_id + 1));
  parts.exists.resize(size_t(max_id + 1), false);
  parts.special.assign(size_t(max_id + 1), false);
  for (const AddedToken& a : parts.added) {
    parts.tokens[size_t(a.id)] = a.content;
    parts.exists[size_t(a.id)] = true;
    parts.special[size_t(a.id)] = a.special;
  }
  parts.bytes.resize(parts.tokens.size());
  for (size_t id = 0; id < parts.tokens.size(); ++id) {
    if (parts.exists[id]) parts.bytes[id] = duet::tokenizer::token_bytes(parts.tokens[id]);
  }
  // The model sees its own vocabulary (not the added tokens that override an id); BPE can only produce
  // tokens spelled in the byte-level alphabet.
  std::vector<bool> has_bytes(parts.tokens.size(), false);
  std::vector<std::string> model_bytes(parts.tokens.size());
  for (const auto& [token, id] : parts.vocab) {
    if (auto b = byte_level_decode(token)) {
      model_bytes[size_t(id)] = std::move(*b);
      has_bytes[size_t(id)] = true;
    }
  }
  parts.model = std::make_unique<BpeModel>(std::move(model_bytes), std::move(has_bytes), merges, ignore_merges);

  // eos/pad need token_to_id, so they are read from a tokenizer built without them.
  auto chat_template = config.find("chat_template");
  if (chat_template != config.end() && !chat_template->is_null()) {
    if (chat_template->is_string()) {
      parts.chat_template = chat_template->get<std::string>();
    } else if (chat_template->is_array()) {
      for (const json& named : *chat_template) {
        if (!named.is_object() || !named.contains("template") || !named["template"].is_string()) {
          fail("{}: chat_template entries need a \"template\" string", config_origin);
        }
        const bool is_default = named.value("name", std::string()) == "default";
        if (parts.chat_template.empty() || is_default) parts.chat_template = named["template"];
        if (is_default) break;
      }
    } else {
      fail("{}: chat_template must be a string or a list of named templates", config_origin);
    }
  }
  auto tokenizer = std::make_unique<BpeTokenizer>(std::move(parts));
  auto eos = config_token(config, "eos_token", *tokenizer, config_origin);
  auto pad = config_token(config, "pad_token", *tokenizer, config_origin);
  tokenizer->set_config_ids(eos, pad);
  return tokenizer;
}

std::unique_ptr<Tokenizer> Tokenizer::load_dir(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "tokenizer.json").string();
  const std::string config_path = (std::filesystem::path(dir) / "tokenizer_config.json").string();
  const std::string text = read_file(path);
  const std::string config = std::filesystem::exists(config_path) ? read_file(config_path) : std::string();
  auto tokenizer = load_json(text, config, path);
  // Newer transformers save the template beside the config instead of inside it.
  const std::string jinja_path = (std::filesystem::path(dir) / "chat_template.jinja").string();
  if (tokenizer->chat_template().empty() && std::filesystem::exists(jinja_path)) {
    static_cast<BpeTokenizer&>(*tokenizer).set_chat_template(read_file(jinja_path));
  }
  return tokenizer;
}

}  // namespace duet::tokenizer
