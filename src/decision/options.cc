#include "decision/options.h"

#include <algorithm>
#include <numeric>

namespace duet::decision {

namespace {
std::optional<std::string> description(const Json& value) {
  if (value.is_null()) return std::nullopt;
  return value.get<std::string>();
}
}  // namespace

OrderedOptions order_options(QuestionType type, const Json& criteria) {
  OrderedOptions out;
  switch (type) {
    case QuestionType::noul:
      for (const char* key : {"true", "false"}) {
        // A key given (even as null) overrides the default, as the reference's criteria.get(key, default) does.
        const bool given = criteria.is_object() && criteria.contains(key);
        out.encoded.push_back({key, given ? description(criteria.at(key))
                                          : std::string(key[0] == 't' ? kNoulTrueDefault : kNoulFalseDefault)});
      }
      out.request_order = {0, 1};
      break;
    case QuestionType::choice: {
      std::vector<Option> listed;
      for (const auto& [id, value] : criteria.items()) listed.push_back({id, description(value)});
      std::vector<size_t> by_id(listed.size());
      std::iota(by_id.begin(), by_id.end(), 0);
      // UTF-8 byte order is code point order (Python sorts str that way; JavaScript's UTF-16 order differs).
      std::sort(by_id.begin(), by_id.end(), [&](size_t a, size_t b) { return listed[a].id < listed[b].id; });
      out.request_order.resize(listed.size());
      for (size_t position = 0; position < by_id.size(); ++position) {
        out.encoded.push_back(listed[by_id[position]]);
        out.request_order[by_id[position]] = position;
      }
      break;
    }
    case QuestionType::score:
      for (size_t level = 0; level < criteria.size(); ++level) {
        out.encoded.push_back({std::to_string(level), criteria[level].get<std::string>()});
        out.request_order.push_back(level);
      }
      break;
  }
  return out;
}

}  // namespace duet::decision
