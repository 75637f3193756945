#include "decision/render.h"

#include "tokenizer/python_json.h"

namespace duet::decision {

std::string render(const Json& value) {
  if (value.is_string()) return value.get<std::string>();
  return tokenizer::python_json(value, {.compact = true, .sort_keys = true});
}

std::string render_option(const Option& option) {
  Json value = {{"option_id", option.id}};
  if (option.description) value["description"] = *option.description;
  return render(value);
}

}  // namespace duet::decision
