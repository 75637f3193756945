#include "server/system_messages.h"

#include <fmt/format.h>

#include "server/errors.h"

namespace duet::server {

void join_leading_system_messages(std::vector<tokenizer::ChatMessage>& messages, std::span<const std::string> names) {
  size_t leading = 0;
  while (leading < messages.size() && messages[leading].role == "system") ++leading;
  for (size_t i = leading; i < messages.size(); ++i)
    if (messages[i].role == "system") {
      const std::string& name = i < names.size() ? names[i] : names.back();
      throw ApiError(400,
                     fmt::format("{}: a system or developer message must come before every user, assistant and tool "
                                 "message (the ones at the start are joined into one)",
                                 name),
                     name, "invalid_messages");
    }
  if (leading < 2) return;
  for (size_t i = 1; i < leading; ++i) messages[0].content += "\n\n" + messages[i].content;
  messages.erase(messages.begin() + 1, messages.begin() + static_cast<std::ptrdiff_t>(leading));
}

}  // namespace duet::server
