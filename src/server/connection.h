#pragma once
// One client connection. It reads requests one after another (keep-alive and pipelining: answers go out in order),
// judges each from its header before reading the body (request_gate.h), runs its route, and sends the answer:
// whole, or streamed from the engine's events, which the engine thread posts to this connection's strand. No thread
// waits on a client or on the engine, and an idle connection costs its socket and a few hundred bytes.
//
// A client that closes its side while its request runs is taken as gone: the request is cancelled (its slot frees
// at the engine's next step) and what the engine ends it with is still written, in case the client only
// half-closed. A stream whose client stops reading is cut, and its request cancelled, once --max-unsent-bytes wait
// or no byte was taken for --send-timeout.
#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/access_log.h"
#include "server/api_keys.h"
#include "server/body_budget.h"
#include "server/connection_registry.h"
#include "server/generation.h"
#include "server/http_limits.h"
#include "server/request_reader.h"
#include "server/route_table.h"
#include "server/wire_format.h"

namespace duet::server {

class Connection;

// What every connection shares with the server that accepted it.
struct ConnectionShared {
  ServerContext& context;
  const RouteTable& routes;
  const ApiKeys& keys;
  const HttpLimits& limits;
  boost::asio::thread_pool& workers;        // POST handlers run here
  boost::asio::thread_pool& large_workers;  // and those of large bodies here, so that they never hold small ones
  BodyBudget& bodies;                       // --max-buffered-body-bytes
  ConnectionRegistry<Connection>& registry;
  std::atomic<bool> shutting_down = false;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  using Strand = boost::asio::strand<boost::asio::io_context::executor_type>;

  // The socket's executor must be a strand of its own.
  Connection(boost::asio::ip::tcp::socket socket, ConnectionShared& shared);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Each posts to the connection's strand, so any thread may call it.
  void start();                        // serve requests
  void refuse(HttpResponse response);  // answer at once without reading (over --max-connections), then close
  void shut_down();                    // the server stops: idle now closes; a request in progress finishes first
  void cancel_request();               // the grace period is over: a running request ends `cancelled`
  void close();                        // at once
  // Once no I/O thread runs any more: stop listening to the engine (its request is cancelled).
  void detach_from_engine();

  // Since when (steady clock, ns) the connection waits for a request with none in progress; 0 while it has one.
  int64_t idle_since() const { return idle_since_.load(std::memory_order_relaxed); }
  // Closes the connection if it is still idle since `since` (the server needs its place); false if it is not.
  bool evict(int64_t since);

 private:
  enum class Phase { reading, handling, sending, lingering, closed };
  enum class Deadline { idle, header, body, tick, linger };
  using Clock = std::chrono::steady_clock;

  void start_request();
  void process_input();
  bool judge_header();
  // Holds `bytes` of body in the budget (--max-buffered-body-bytes); when they do not fit, answers 503 and closes.
  bool hold_body(size_t bytes);
  void dispatch();
  void deliver(HttpResponse response);
  void listen_to_engine();
  void take_events();
  void answer(const HttpResponse& response);
  void answer_and_close(const HttpResponse& response);
  void finish_response();
  // The answer's status, for the metrics and the access log.
  void note_status(int status);
  // Writes the request's access-log line, once.
  void log_access();
  void linger();

  void wait_readable();
  void on_readable(const boost::system::error_code& ec);
  void on_input();
  void client_gone();
  void close_now();

  void send(std::string bytes);
  void write_next();
  void on_written(const boost::system::error_code& ec, size_t bytes);

  void arm(Deadline deadline);
  void disarm();
  void on_deadline();
  void on_tick();

  ConnectionShared& shared_;
  boost::asio::ip::tcp::socket socket_;
  boost::asio::steady_timer timer_;
  uint64_t timer_serial_ = 0;  // a deadline that fires after it was replaced is ignored
  Deadline deadline_ = Deadline::idle;
  Phase phase_ = Phase::reading;

  boost::beast::flat_buffer input_;
  bool waiting_readable_ = false;
  bool input_ended_ = false;  // the client closed (or half-closed) its side
  std::optional<RequestReader> reader_;
  BodyBudget::Lease body_lease_;  // the request's body bytes, until its route is done with them
  std::atomic<int64_t> idle_since_ = 0;

  // The request in progress.
  const RouteTable::Route* route_ = nullptr;
  std::string route_name_ = "unmatched";
  Framing framing_;
  std::shared_ptr<GenerationBody> generation_;
  bool cancel_on_delivery_ = false;  // the request must be cancelled as soon as its route returns
  bool response_ended_ = false;      // the last bytes of the answer are queued

  std::vector<std::string> queued_;     // answer bytes not yet handed to the socket
  std::vector<std::string> in_flight_;  // those being written
  size_t unsent_ = 0;                   // both together
  bool writing_ = false;
  Clock::time_point last_progress_;      // the client last took bytes
  Clock::time_point last_stream_bytes_;  // a stream last sent something
  std::string client_address_;           // the peer, for the access log
  std::optional<AccessRecord> access_;   // the request in progress, until its line is written
  Clock::time_point request_started_;    // its first byte
};

}  // namespace duet::server
