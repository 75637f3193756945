#include "server/generation.h"

#include <fmt/format.h>
#include <httplib.h>

#include <random>

#include "base/log.h"
#include "server/errors.h"
#include "server/sse.h"

namespace duet::server {
namespace {

using Clock = std::chrono::steady_clock;

// How long a stream may stay silent before a keep-alive comment checks that the client is still there.
constexpr auto kKeepAliveAfter = std::chrono::seconds(1);
constexpr auto kPollInterval = std::chrono::milliseconds(250);

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

}  // namespace

std::shared_ptr<engine::RequestHandle> submit_request(ServerContext& context, engine::Request request,
                                                      const std::string& prompt_param) {
  try {
    return context.backend.submit(std::move(request));
  } catch (const engine::QueueFull& full) {
    ApiError error(429, std::string("the server is busy: ") + full.what() + "; retry later", "", "rate_limit_exceeded");
    error.retry_after_s = 1;
    throw error;
  } catch (const engine::RequestInvalid& invalid) {
    throw ApiError(400, invalid.what(), prompt_param, invalid.code());
  }
}

CollectedGeneration collect_generation(ServerContext& context, engine::RequestHandle& handle) {
  CollectedGeneration result;
  auto start = Clock::now();
  while (true) {
    auto event = handle.next(std::chrono::seconds(1));
    if (!event) continue;
    if (auto* token = std::get_if<engine::TokenEvent>(&*event)) {
      result.text += token->text;
      result.tokens.push_back(std::move(*token));
      continue;
    }
    result.finished = std::get<engine::FinishedEvent>(std::move(*event));
    result.text += result.finished.text_tail;
    context.metrics.record_finished(result.finished, seconds_since(start));
    if (result.finished.reason == engine::FinishReason::error)
      throw ApiError(500, "generation failed: " + result.finished.error, "", "engine_error");
    return result;
  }
}

void stream_generation(ServerContext& context, httplib::Response& res, std::shared_ptr<engine::RequestHandle> handle,
                       std::unique_ptr<StreamFormatter> formatter) {
  struct StreamState {
    std::shared_ptr<engine::RequestHandle> handle;
    std::unique_ptr<StreamFormatter> formatter;
    Clock::time_point start = Clock::now();
    Clock::time_point last_write = Clock::now();
    bool started = false;
    bool finished = false;
  };
  auto state = std::make_shared<StreamState>();
  state->handle = std::move(handle);
  state->formatter = std::move(formatter);

  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [state, &metrics = context.metrics](size_t, httplib::DataSink& sink) {
        std::string out;
        if (!state->started) {
          out = state->formatter->start();
          state->started = true;
        }
        // Everything that is ready goes out in one write.
        std::vector<engine::TokenEvent> tokens;
        std::optional<engine::FinishedEvent> finished;
        auto event = state->handle->next(out.empty() ? kPollInterval : std::chrono::milliseconds(0));
        while (event) {
          if (auto* token = std::get_if<engine::TokenEvent>(&*event)) {
            tokens.push_back(std::move(*token));
          } else {
            finished = std::get<engine::FinishedEvent>(std::move(*event));
            break;
          }
          event = state->handle->next(std::chrono::milliseconds(0));
        }
        if (!tokens.empty()) out += state->formatter->tokens(tokens);
        if (finished) {
          metrics.record_finished(*finished, seconds_since(state->start));
          out += state->formatter->finish(*finished);
          out += sse_done();
        }
        if (out.empty() && Clock::now() - state->last_write > kKeepAliveAfter) out = sse_keepalive();
        if (!out.empty()) {
          // A failed write means the client is gone: stop generating for it.
          if (!sink.write(out.data(), out.size())) {
            state->handle->cancel();
            return false;
          }
          state->last_write = Clock::now();
        }
        if (finished) {
          state->finished = true;
          sink.done();
        }
        return true;
      },
      [state](bool success) {
        // Called once the response ends, however it ends; a stream that did not finish is cancelled.
        if (!state->finished) {
          log_debug("stream ended before its request finished (client gone); cancelling");
          state->handle->cancel();
        }
      });
}

std::string random_id(std::string_view prefix) {
  thread_local std::mt19937_64 generator{std::random_device{}()};
  return fmt::format("{}{:016x}{:08x}", prefix, generator(), static_cast<uint32_t>(generator()));
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

nlohmann::json usage_json(int32_t prompt_tokens, int32_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

nlohmann::json chunk_header(const std::string& id, std::string_view object, int64_t created, const std::string& model,
                            bool include_usage) {
  nlohmann::json json = {{"id", id}, {"object", object}, {"created", created}, {"model", model}};
  if (include_usage) json["usage"] = nullptr;
  return json;
}

std::string usage_chunk(nlohmann::json header, const engine::FinishedEvent& finished) {
  header["choices"] = nlohmann::json::array();
  header["usage"] = usage_json(finished.prompt_tokens, finished.completion_tokens);
  return sse_event(header);
}

std::string token_text(const tokenizer::Tokenizer& tokenizer, int32_t id) {
  try {
    return tokenizer.decode(std::span<const int32_t>(&id, 1), false);
  } catch (const std::exception&) {
    return {};  // an id the tokenizer lacks (a padded vocabulary row): no text
  }
}

nlohmann::json token_bytes(const std::string& text) {
  auto bytes = nlohmann::json::array();
  for (unsigned char c : text) bytes.push_back(static_cast<int>(c));
  return bytes;
}

}  // namespace duet::server
