#include "server/connection.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>

#include "base/log.h"
#include "server/access_log.h"
#include "server/cors.h"
#include "server/request_gate.h"
#include "server/sse.h"

namespace duet::server {
namespace {

namespace asio = boost::asio;

constexpr size_t kReadChunk = 16u << 10;
constexpr size_t kMinRead = 512;
// Bytes of the next (pipelined) request kept while one runs; past it the client waits in the kernel's buffers.
constexpr size_t kReadAhead = 64u << 10;
constexpr auto kTick = std::chrono::seconds(1);  // stall checks and stream keep-alive comments
// After the last answer on a connection, how long its client may take to close before we do. Closing with the
// client's bytes unread would reset the connection and could destroy the answer before the client reads it.
constexpr auto kLinger = std::chrono::seconds(2);
// Bodies of this size or more are parsed on the large-body workers: parsing is linear, but an 8 MiB body still takes
// about a tenth of a second, and a few of them must not queue every small request behind them.
constexpr size_t kLargeBody = 256u << 10;

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

HttpResponse run_route(const RouteTable::Route& route, const HttpRequest& request) {
  return response_of([&] { return route.handler(request); }, request.method + " " + route.path);
}

HttpResponse timeout_response(std::string_view part, std::chrono::seconds limit, std::string_view flag) {
  return error_response(
      ApiError(408, fmt::format("the request {} did not arrive within {} s ({})", part, limit.count(), flag), "",
               "request_timeout"));
}

}  // namespace

Connection::Connection(asio::ip::tcp::socket socket, ConnectionShared& shared)
    : shared_(shared), socket_(std::move(socket)), timer_(socket_.get_executor()) {
  boost::system::error_code ec;
  const auto peer = socket_.remote_endpoint(ec);
  if (!ec) client_address_ = peer.address().to_string() + ":" + std::to_string(peer.port());
  shared_.context.metrics.connection_opened();
}

Connection::~Connection() {
  if (generation_) {
    generation_->set_listener(nullptr);
    generation_->cancel();
  }
  shared_.context.metrics.connection_closed();
  shared_.registry.remove(this);
}

void Connection::start() {
  asio::post(socket_.get_executor(), [self = shared_from_this()] {
    boost::system::error_code ec;
    self->socket_.non_blocking(true, ec);  // reads happen when the socket is readable, never blocking
    self->start_request();
  });
}

void Connection::refuse(HttpResponse response) {
  asio::post(socket_.get_executor(), [self = shared_from_this(), response = std::move(response)] {
    boost::system::error_code ec;
    self->socket_.non_blocking(true, ec);
    self->shared_.context.metrics.connection_refused();
    self->shared_.context.metrics.count_response("unmatched", response.status);
    self->answer_and_close(response);
  });
}

void Connection::shut_down() {
  asio::post(socket_.get_executor(), [self = shared_from_this()] {
    if (self->phase_ == Phase::closed) return;
    if (self->phase_ == Phase::reading && !self->reader_ && self->input_.size() == 0) {
      self->close_now();  // idle between requests
      return;
    }
    self->framing_.keep_alive = false;  // the request in progress is the last
  });
}

void Connection::cancel_request() {
  asio::post(socket_.get_executor(), [self = shared_from_this()] {
    if (self->generation_)
      self->generation_->cancel();
    else
      self->cancel_on_delivery_ = true;
  });
}

void Connection::close() {
  asio::post(socket_.get_executor(), [self = shared_from_this()] { self->close_now(); });
}

bool Connection::evict(int64_t since) {
  if (since == 0 || !idle_since_.compare_exchange_strong(since, 0, std::memory_order_relaxed)) return false;
  log_debug("closing the connection of {}, idle the longest, to make room for a new one (--max-connections)",
            client_address_);
  close();
  return true;
}

void Connection::detach_from_engine() {
  if (!generation_) return;
  generation_->set_listener(nullptr);
  generation_->cancel();
}

// Reading a request.

void Connection::start_request() {
  phase_ = Phase::reading;
  reader_.reset();
  route_ = nullptr;
  route_name_ = "unmatched";
  framing_ = {};
  generation_.reset();
  response_ended_ = false;
  body_lease_.release();
  if (input_.size() == 0) input_.shrink_to_fit();  // an idle connection holds no buffer
  idle_since_.store(steady_ns(), std::memory_order_relaxed);
  arm(Deadline::idle);
  process_input();
}

void Connection::process_input() {
  while (phase_ == Phase::reading) {
    if (!reader_) {
      if (input_.size() == 0) break;
      reader_.emplace(shared_.limits);
      idle_since_.store(0, std::memory_order_relaxed);
      access_ = AccessRecord{};
      access_->client = client_address_;
      request_started_ = Clock::now();
      arm(Deadline::header);  // from the request's first byte to the end of its header, in total
    }
    try {
      const auto* data = static_cast<const char*>(input_.data().data());
      input_.consume(reader_->feed(std::string_view(data, input_.size())));
    } catch (const ApiError& error) {
      note_status(error.status());
      answer_and_close(error_response(error));
      return;
    } catch (const std::exception& error) {
      // Nothing a client sends may end the process: whatever else the reading throws closes this request alone.
      log_warn("reading a request from {} failed: {}", client_address_, error.what());
      note_status(400);
      answer_and_close(error_response(ApiError(400, "the request could not be read", "", "bad_request")));
      return;
    }
    if (reader_->state() != RequestReader::State::header && !hold_body(reader_->body_bytes())) return;
    switch (reader_->state()) {
      case RequestReader::State::header_done:
        if (!judge_header()) return;
        continue;
      case RequestReader::State::complete:
        dispatch();
        return;
      case RequestReader::State::header:
      case RequestReader::State::body:
        if (input_ended_) {
          if (!reader_->started()) {
            close_now();
            return;
          }
          note_status(400);
          answer_and_close(error_response(reader_->incomplete()));
          return;
        }
        wait_readable();
        return;
    }
  }
  if (phase_ != Phase::reading) return;
  if (input_ended_)
    close_now();
  else
    wait_readable();
}

bool Connection::judge_header() {
  const bool shutting_down = shared_.shutting_down;
  GateVerdict verdict = check_request_head(
      reader_->head(), reader_->content_length(), reader_->chunked(),
      GateRules{shared_.routes, shared_.keys, shared_.limits.max_body_bytes, shutting_down,
                &shared_.context.options.cors_origins, !shared_.context.ready.load(std::memory_order_acquire)});
  route_ = verdict.route;
  route_name_ = verdict.route_name;
  framing_.keep_alive = reader_->keep_alive() && !shutting_down && !input_ended_;
  framing_.head_only = reader_->head().method == "HEAD";
  if (access_) access_->method = reader_->head().method.substr(0, 16);
  framing_.http_1_0 = reader_->http_1_0();
  framing_.extra_headers = cors_headers(shared_.context.options.cors_origins, reader_->head());
  if (verdict.refusal) {
    note_status(verdict.refusal->status);
    // A body that is never read leaves the connection unable to carry another request.
    const bool body_unread = reader_->chunked() || reader_->content_length().value_or(0) > 0;
    reader_.reset();
    if (body_unread)
      answer_and_close(*verdict.refusal);
    else
      answer(*verdict.refusal);
    return false;
  }
  body_lease_ = BodyBudget::Lease(shared_.bodies);
  if (!hold_body(reader_->content_length().value_or(0))) return false;  // a declared length: before a byte is read
  reader_->read_body();
  if (reader_->state() == RequestReader::State::body) {
    arm(Deadline::body);  // from the end of the header to the end of the body, in total
    if (reader_->expects_continue()) send(std::string(kContinue));
  }
  return true;
}

bool Connection::hold_body(size_t bytes) {
  if (body_lease_.hold(bytes)) return true;
  ApiError error(503,
                 fmt::format("the server holds {} bytes of request bodies, its limit (--max-buffered-body-bytes); "
                             "retry later",
                             shared_.bodies.in_use()),
                 "", "server_busy");
  error.retry_after_s = 1;
  note_status(503);
  answer_and_close(error_response(error));  // the body is left unread
  return false;
}

void Connection::dispatch() {
  HttpRequest request = reader_->take_request();
  reader_.reset();
  phase_ = Phase::handling;
  disarm();  // a request may wait for the engine as long as it needs; the client's hang-up is watched instead
  wait_readable();
  const RouteTable::Route* route = route_;
  if (route->method == RouteTable::Method::get) {
    deliver(run_route(*route, request));
    return;
  }
  auto& workers = request.body.size() >= kLargeBody ? shared_.large_workers : shared_.workers;
  asio::post(workers, [self = shared_from_this(), route, request = std::move(request),
                       lease = std::move(body_lease_)]() mutable {
    HttpResponse response = run_route(*route, request);
    { HttpRequest done = std::move(request); }  // the body is freed before its bytes go back to the budget
    lease.release();
    asio::post(self->socket_.get_executor(),
               [self, response = std::move(response)]() mutable { self->deliver(std::move(response)); });
  });
}

// Answering.

void Connection::deliver(HttpResponse response) {
  if (phase_ == Phase::closed) {
    if (response.generation) response.generation->cancel();
    return;
  }
  if (!response.generation) {
    note_status(response.status);
    answer(response);
    return;
  }
  generation_ = std::move(response.generation);
  if (cancel_on_delivery_ || input_ended_) generation_->cancel();
  if (generation_->streams()) {
    note_status(response.status);
    if (framing_.http_1_0) framing_.keep_alive = false;  // its stream ends by closing
    phase_ = Phase::sending;
    arm(Deadline::tick);
    send(stream_head(response, framing_) + stream_piece(generation_->begin(), framing_));
    last_stream_bytes_ = Clock::now();
  }
  listen_to_engine();
}

// The engine thread announces events by posting to this strand; the weak pointer lets a connection that is gone
// ignore them.
void Connection::listen_to_engine() {
  std::weak_ptr<Connection> weak = weak_from_this();
  auto strand = socket_.get_executor();
  generation_->set_listener([weak, strand] {
    asio::post(strand, [weak] {
      if (auto self = weak.lock()) self->take_events();
    });
  });
}

void Connection::take_events() {
  if (!generation_ || phase_ == Phase::closed || generation_->done()) return;
  std::string text;
  if (!generation_->take_ready(text)) return;
  if (!generation_->streams()) {
    if (!generation_->done()) return;
    HttpResponse whole = generation_->answer();
    note_status(whole.status);
    answer(whole);
    return;
  }
  if (!text.empty()) {
    send(stream_piece(text, framing_));
    last_stream_bytes_ = Clock::now();
  }
  if (generation_->done()) {
    response_ended_ = true;
    send(stream_end(framing_));
    return;
  }
  if (unsent_ > shared_.limits.max_unsent_bytes) {
    log_info("a stream's client stopped reading: {} bytes unsent (--max-unsent-bytes {}); its request is cancelled",
             unsent_, shared_.limits.max_unsent_bytes);
    close_now();
  }
}

void Connection::answer(const HttpResponse& response) {
  phase_ = Phase::sending;
  arm(Deadline::tick);
  response_ended_ = true;
  send(whole_response(response, framing_));
}

void Connection::answer_and_close(const HttpResponse& response) {
  reader_.reset();
  body_lease_.release();
  framing_.keep_alive = false;
  answer(response);
}

void Connection::note_status(int status) {
  shared_.context.metrics.count_response(route_name_, status);
  if (access_) {
    access_->status = status;
    access_->route = route_name_;
  }
}

void Connection::log_access() {
  if (!access_) return;
  access_->total_s = std::chrono::duration<double>(Clock::now() - request_started_).count();
  if (generation_) {
    if (auto usage = generation_->usage()) {
      access_->prompt_tokens = usage->prompt_tokens;
      access_->completion_tokens = usage->completion_tokens;
      access_->cached_tokens = usage->cached_tokens;  // resumed from the prompt cache
      if (usage->completion_tokens > 0) access_->time_to_first_token_s = usage->time_to_first_token_s;
      access_->prefill_s = usage->decision_prefill_s;
      access_->head_s = usage->decision_head_s;
    }
    access_->user = generation_->client.user;
    access_->safety_identifier = generation_->client.safety_identifier;
  }
  write_access_line(*access_, shared_.context.options.log_json);
  access_.reset();
}

void Connection::finish_response() {
  log_access();
  if (generation_) generation_->set_listener(nullptr);
  generation_.reset();
  cancel_on_delivery_ = false;
  if (!framing_.keep_alive || shared_.shutting_down)
    linger();
  else
    start_request();
}

void Connection::linger() {
  phase_ = Phase::lingering;
  boost::system::error_code ec;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_send, ec);
  if (input_ended_ || ec) {
    close_now();
    return;
  }
  input_.clear();
  arm(Deadline::linger);
  wait_readable();
}

// Input. The socket is waited on for readability, and read only then: a connection waiting for a request holds
// no buffer.

void Connection::wait_readable() {
  if (waiting_readable_ || input_ended_ || phase_ == Phase::closed) return;
  if ((phase_ == Phase::handling || phase_ == Phase::sending) && input_.size() >= kReadAhead) return;
  waiting_readable_ = true;
  socket_.async_wait(asio::ip::tcp::socket::wait_read,
                     [self = shared_from_this()](const boost::system::error_code& ec) { self->on_readable(ec); });
}

void Connection::on_readable(const boost::system::error_code& ec) {
  waiting_readable_ = false;
  if (phase_ == Phase::closed) return;
  if (ec) {
    close_now();
    return;
  }
  // As much as is there, in at most kReadChunk: a client sending a few bytes at a time gets a small buffer.
  boost::system::error_code read_error;
  const size_t ready = socket_.available(read_error);
  const size_t bytes = socket_.read_some(input_.prepare(std::clamp(ready, kMinRead, kReadChunk)), read_error);
  if (read_error == asio::error::would_block || read_error == asio::error::try_again) {
    wait_readable();
    return;
  }
  if (read_error == asio::error::eof) {
    input_ended_ = true;
  } else if (read_error) {
    close_now();  // reset by the client
    return;
  } else {
    input_.commit(bytes);
  }
  on_input();
}

void Connection::on_input() {
  switch (phase_) {
    case Phase::reading:
      process_input();
      return;
    case Phase::handling:
    case Phase::sending:
      if (input_ended_)
        client_gone();
      else
        wait_readable();  // pipelined bytes wait in input_ for their turn
      return;
    case Phase::lingering:
      input_.clear();
      if (input_ended_)
        close_now();
      else
        wait_readable();
      return;
    case Phase::closed:
      return;
  }
}

void Connection::client_gone() {
  log_debug("client closed its connection while its request ran: cancelling the request");
  if (generation_)
    generation_->cancel();
  else
    cancel_on_delivery_ = true;
  framing_.keep_alive = false;
}

void Connection::close_now() {
  if (phase_ == Phase::closed) return;
  phase_ = Phase::closed;
  log_access();  // a request whose answer did not finish (status 0 when none was sent)
  if (generation_) {
    generation_->set_listener(nullptr);
    generation_->cancel();
  }
  cancel_on_delivery_ = true;
  idle_since_.store(0, std::memory_order_relaxed);
  body_lease_.release();
  disarm();
  boost::system::error_code ec;
  socket_.close(ec);
  queued_.clear();
}

// Output: one write at a time, with everything queued meanwhile gathered into the next.

void Connection::send(std::string bytes) {
  if (phase_ == Phase::closed) return;
  if (!bytes.empty()) {
    unsent_ += bytes.size();
    queued_.push_back(std::move(bytes));
  }
  if (!writing_) write_next();
}

void Connection::write_next() {
  if (queued_.empty()) {
    writing_ = false;
    if (phase_ == Phase::sending && response_ended_) finish_response();
    return;
  }
  if (!writing_) last_progress_ = Clock::now();
  writing_ = true;
  in_flight_.assign(std::make_move_iterator(queued_.begin()), std::make_move_iterator(queued_.end()));
  queued_.clear();
  std::vector<asio::const_buffer> buffers;
  buffers.reserve(in_flight_.size());
  for (const auto& bytes : in_flight_) buffers.push_back(asio::buffer(bytes));
  asio::async_write(socket_, buffers, [self = shared_from_this()](const boost::system::error_code& ec, size_t bytes) {
    self->on_written(ec, bytes);
  });
}

void Connection::on_written(const boost::system::error_code& ec, size_t bytes) {
  if (phase_ == Phase::closed) return;
  if (ec) {
    close_now();  // the client is gone
    return;
  }
  unsent_ -= bytes;
  last_progress_ = Clock::now();
  in_flight_.clear();
  write_next();
}

// Deadlines: one timer, set for what the connection waits on now.

void Connection::arm(Deadline deadline) {
  const HttpLimits& limits = shared_.limits;
  deadline_ = deadline;
  const uint64_t serial = ++timer_serial_;
  switch (deadline) {
    case Deadline::idle:
      timer_.expires_after(limits.idle_timeout);
      break;
    case Deadline::header:
      timer_.expires_after(limits.header_timeout);
      break;
    case Deadline::body:
      timer_.expires_after(limits.body_timeout);
      break;
    case Deadline::tick:
      timer_.expires_after(kTick);
      break;
    case Deadline::linger:
      timer_.expires_after(kLinger);
      break;
  }
  timer_.async_wait([self = shared_from_this(), serial](const boost::system::error_code& ec) {
    if (!ec && serial == self->timer_serial_ && self->phase_ != Phase::closed) self->on_deadline();
  });
}

void Connection::disarm() {
  ++timer_serial_;
  timer_.cancel();
}

void Connection::on_deadline() {
  const HttpLimits& limits = shared_.limits;
  switch (deadline_) {
    case Deadline::idle:
    case Deadline::linger:
      close_now();
      return;
    case Deadline::header:
      note_status(408);
      answer_and_close(timeout_response("header", limits.header_timeout, "--header-timeout"));
      return;
    case Deadline::body:
      note_status(408);
      answer_and_close(timeout_response("body", limits.body_timeout, "--body-timeout"));
      return;
    case Deadline::tick:
      on_tick();
      return;
  }
}

void Connection::on_tick() {
  const auto now = Clock::now();
  if (writing_ && now - last_progress_ > shared_.limits.send_timeout) {
    log_info("a client took no bytes for {} s (--send-timeout): closing its connection",
             shared_.limits.send_timeout.count());
    close_now();
    return;
  }
  // A silent stream sends a comment now and then: proxies keep it open, and a client that left shows up as a
  // failed write.
  if (generation_ && generation_->streams() && !response_ended_ && !writing_ &&
      now - last_stream_bytes_ >= std::chrono::seconds(1)) {
    send(stream_piece(sse_keepalive(), framing_));
    last_stream_bytes_ = now;
  }
  arm(Deadline::tick);
}

}  // namespace duet::server
