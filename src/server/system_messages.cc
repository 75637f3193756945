#include "server/system_messages.h"

namespace duet::server {

void join_leading_system_messages(std::vector<tokenizer::ChatMessage>& messages) {
  size_t leading = 0;
  while (leading < messages.size() && messages[leading].role == "system") ++leading;
  if (leading < 2) return;
  for (size_t i = 1; i < leading; ++i) messages[0].content += "\n\n" + messages[i].content;
  messages.erase(messages.begin() + 1, messages.begin() + static_cast<std::ptrdiff_t>(leading));
}

}  // namespace duet::server
