// A rogue rank that speaks the wire protocol by hand (over UCX or the fake transport, whichever
// the test links), and the fixture that puts it beside a real engine at rank 0 (tests/unit/am).
#pragma once

#include <cstring>
#include <deque>
#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <sluice/context.h>

#include "transport/transport.h"
#include "wire/wire.h"

namespace sluice::detail::rogue {

using Bytes = std::vector<std::byte>;

struct Received {
  wire::Header header;
  Bytes body;  // after the wire header
  Tag tag;
  std::uint64_t batch = 0;  // which tagged message it came in (coalesced ones share it)
};

class Rogue {
 public:
  void start(Bootstrap& boot) {
    ucx_ = std::move(*TransportContext::create(Config()));
    worker_ = std::move(*Worker::create(*ucx_));
    ASSERT_TRUE(boot.put("sluice.engine.0", worker_->address()).ok());
    ASSERT_TRUE(boot.fence().ok());
    auto addr = boot.get(0, "sluice.engine.0");
    ASSERT_TRUE(addr.ok());
    ep_ = std::move(*worker_->connect(
        *addr, [](void*, int) {}, nullptr));
    for (auto& r : rx_) post(r);
  }

  void send(const wire::Header& h, std::span<const std::byte> body, wire::TagClass cls = wire::kEager,
            std::uint8_t version = wire::kVersion) {
    Bytes buf(wire::kHeaderSize + body.size());
    wire::encode(h, buf.data());
    buf[2] = static_cast<std::byte>(version);
    if (!body.empty()) std::memcpy(buf.data() + wire::kHeaderSize, body.data(), body.size());
    send_raw(std::move(buf), cls == wire::kEager ? eager_tag() : wire::make_tag(cls, 1, 0));
  }

  // The engine's receive key for us, from its HELLO (expect_hello); EAGER tags carry it.
  void set_key(std::uint64_t key) { key_ = key; }
  std::uint64_t eager_tag() const { return wire::make_tag(wire::kEager, 1, key_); }
  static constexpr std::uint64_t kKey = 0x5eed;  // ours, in our HELLO

  void send_raw(Bytes bytes, Tag tag) {
    auto buf = std::make_unique<Bytes>(std::move(bytes));
    auto op = std::make_unique<TransportOp>();
    op->on_complete = [](TransportOp*, absl::StatusCode, std::size_t, Tag) {};
    auto r = ep_.post_send(op.get(), buf->data(), buf->size(), tag, nullptr);
    ASSERT_NE(r.kind, Post::kError);
    keep_.push_back(std::move(buf));
    ops_.push_back(std::move(op));
  }

  // Data messages with sequences first, first+1, ... (payload: the sequence times 10), coalesced
  // into one tagged message; the message at `corrupt` gets a bad magic, the one at `ctrl` is
  // made a CREDIT control message (which no sender may coalesce).
  void coalesced(std::uint64_t first, std::size_t count, std::size_t corrupt = SIZE_MAX, std::size_t ctrl = SIZE_MAX) {
    Bytes out;
    std::uint64_t seq = first;
    for (std::size_t i = 0; i < count; ++i) {
      wire::Header h;
      std::size_t body = 0;
      if (i == ctrl) {  // a well-formed CREDIT returning one credit
        h.flags = wire::kFlagCtrl;
        h.handler = wire::kCredit;
        h.credits = 1;
      } else {
        h.handler = 5;
        h.seq = seq++;
        h.payload_len = sizeof(std::uint32_t);
        body = sizeof(std::uint32_t);
      }
      if (i + 1 < count) h.flags |= wire::kFlagMore;
      out.resize((out.size() + 7) / 8 * 8);
      std::size_t at = out.size();
      out.resize(at + wire::kHeaderSize + body);
      wire::encode(h, out.data() + at);
      auto v = static_cast<std::uint32_t>(h.seq * 10);
      if (body != 0) std::memcpy(out.data() + at + wire::kHeaderSize, &v, sizeof(v));
      if (i == corrupt) out[at] = std::byte{0};
    }
    send_raw(std::move(out), eager_tag());
  }

  void hello(std::uint32_t credits, std::uint64_t incarnation = 77, std::uint8_t version = wire::kVersion,
             std::uint32_t rpc_window = 4, std::uint32_t rank = 1) {
    wire::Hello h{rank, 0, 8192, credits, rpc_window, 1, incarnation, kKey};
    Bytes body(wire::kHelloSize);
    wire::encode_hello(h, body.data());
    wire::Header hdr;
    hdr.flags = wire::kFlagCtrl;
    hdr.handler = wire::kHello;
    hdr.user_header_len = wire::kHelloSize;
    hdr.aux = incarnation;
    send(hdr, body, wire::kCtrl, version);
  }

  void data(std::uint64_t seq, std::uint16_t handler, std::uint32_t value, std::uint16_t credits = 0) {
    wire::Header h;
    h.handler = handler;
    h.payload_len = sizeof(value);
    h.seq = seq;
    h.credits = credits;
    send(h, std::as_bytes(std::span(&value, 1)));
  }

  // A plain data message with the compact header (the sequence's low 32 bits on the wire).
  void compact_data(std::uint64_t seq, std::uint16_t handler, std::uint32_t value, std::uint16_t credits = 0) {
    Bytes buf(wire::kCompactHeaderSize + sizeof(value));
    wire::encode_compact(0, handler, 0, credits, 0, seq, 0, buf.data());
    std::memcpy(buf.data() + wire::kCompactHeaderSize, &value, sizeof(value));
    send_raw(std::move(buf), eager_tag());
  }

  // A full-header data message with MORE, then a compact one, in one tagged message (which no
  // sender may build: only full headers are coalesced).
  void coalesced_with_compact(std::uint64_t first) {
    wire::Header h;
    h.flags = wire::kFlagMore;
    h.handler = 5;
    h.seq = first;
    h.payload_len = sizeof(std::uint32_t);
    // The compact one is padded to a full header's size: the parser only looks for a next
    // message where a full header fits (a shorter tail fails the whole batch).
    Bytes out(wire::coalesced_stride(h) + wire::kHeaderSize);
    wire::encode(h, out.data());
    auto v = static_cast<std::uint32_t>(first * 10);
    std::memcpy(out.data() + wire::kHeaderSize, &v, sizeof(v));
    std::size_t at = wire::coalesced_stride(h);
    wire::encode_compact(0, 5, 0, 0, 0, first + 1, 0, out.data() + at);
    v = static_cast<std::uint32_t>((first + 1) * 10);
    std::memcpy(out.data() + at + wire::kCompactHeaderSize, &v, sizeof(v));
    send_raw(std::move(out), eager_tag());
  }

  // A control message of `kind` with a chosen aux (a BYE's last sequence, a heartbeat's count
  // of credits returned), on the EAGER tag: in order with our data.
  void ctrl(std::uint16_t kind, std::uint64_t aux = 0, std::span<const std::byte> body = {}) {
    wire::Header h;
    h.flags = wire::kFlagCtrl;
    h.handler = kind;
    h.aux = aux;
    h.user_header_len = static_cast<std::uint16_t>(body.size());
    send(h, body);
  }

  // A GRANT (wire.h): what we lent the engine in all and its target; what we gave back of its
  // loan and how many of our messages wait; the window we grant it (hello()'s 4), the one of
  // its we keep to (0: none said) and our calls waiting. `size`: the body's length (40 unless
  // it lies).
  void grant(std::uint64_t lent, std::uint32_t target, std::uint64_t given_up = 0, std::uint32_t waiting = 0,
             std::size_t size = wire::kGrantSize, std::uint32_t window = 4, std::uint32_t window_seen = 0,
             std::uint32_t calls_waiting = 0) {
    Bytes body(wire::kGrantSize);
    wire::encode_grant({lent, given_up, target, waiting, window, window_seen, calls_waiting}, body.data());
    body.resize(size);
    ctrl(wire::kGrant, 0, body);
  }
  // The last GRANT the engine sent us, decoded.
  wire::Grant last_grant() {
    wire::Grant g{};
    if (!grants_.empty()) {
      EXPECT_EQ(wire::decode_grant(grants_.back().body, &g), wire::Parse::kOk);
    }
    return g;
  }

  void credit(std::uint16_t n) {
    wire::Header h;
    h.flags = wire::kFlagCtrl;
    h.handler = wire::kCredit;
    h.credits = n;
    send(h, {}, wire::kCtrl);
  }

  void progress() { worker_->progress(); }
  std::deque<Received>& received() { return got_; }
  // The PINGs and PONGs the engine sent (kept apart: they come on its own timer).
  std::deque<Received>& heartbeats() { return beats_; }
  // The GRANTs the engine sent (kept apart: it asks for credits when its messages wait).
  std::deque<Received>& grants() { return grants_; }
  // Credits the engine has returned to us so far, piggybacked or explicit.
  std::uint64_t credits_returned() const { return credits_returned_; }

  void stop() {
    ep_ = Endpoint();
    for (auto& r : rx_) worker_->cancel(&r.op);
    for (int i = 0; i < 1000; ++i) worker_->progress();
  }

 private:
  struct Rx {
    Rogue* self;
    TransportOp op;
    Bytes buf = Bytes(16384);
  };
  void post(Rx& r) {
    r.self = this;
    r.op.on_complete = [](TransportOp* op, absl::StatusCode code, std::size_t len, Tag tag) {
      Rx* rx = reinterpret_cast<Rx*>(reinterpret_cast<char*>(op) - offsetof(Rx, op));
      if (code != absl::StatusCode::kOk) return;
      // One tagged message may hold several coalesced messages: each is one received.
      wire::Parse pr = wire::for_each_message(
          std::span<const std::byte>(rx->buf).first(len), [&](const wire::Header& h, std::span<const std::byte> bytes) {
            Received m{};
            m.header = h;
            m.body.assign(bytes.begin() + static_cast<std::ptrdiff_t>(wire::header_size(h)), bytes.end());
            m.tag = tag;
            m.batch = rx->self->batches_;
            rx->self->credits_returned_ += h.credits;  // heartbeats carry them too
            bool ctrl = (h.flags & wire::kFlagCtrl) != 0;
            bool heartbeat = ctrl && (h.handler == wire::kPing || h.handler == wire::kPong);
            if (ctrl && h.handler == wire::kGrant) rx->self->grants_.push_back(std::move(m));
            else (heartbeat ? rx->self->beats_ : rx->self->got_).push_back(std::move(m));
            return true;
          });
      EXPECT_EQ(pr, wire::Parse::kOk);
      ++rx->self->batches_;
      rx->self->post(*rx);
    };
    // EAGER and CTRL classes (bit 60 set in both): what the engine sends us but payloads.
    worker_->post_recv(Endpoint(), &r.op, r.buf.data(), r.buf.size(), Tag{1} << 60, Tag{1} << 60, nullptr);
  }
  std::unique_ptr<TransportContext> ucx_;
  std::unique_ptr<Worker> worker_;
  Endpoint ep_;
  Rx rx_[8];
  std::deque<Received> got_;
  std::deque<Received> beats_;
  std::deque<Received> grants_;
  std::uint64_t batches_ = 0;
  std::uint64_t credits_returned_ = 0;
  std::uint64_t key_ = 0;
  std::vector<std::unique_ptr<Bytes>> keep_;
  std::vector<std::unique_ptr<TransportOp>> ops_;
};

class ProtocolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto boots = make_in_process_group(2);
    std::thread rogue([&] { rogue_.start(*boots[1]); });
    ContextOptions o;
    o.bootstrap = std::move(boots[0]);
    auto ctx = Context::create(std::move(o));
    ASSERT_TRUE(ctx.ok());
    ctx_ = std::move(*ctx);
    auto eng = ctx_->create_engine();
    rogue.join();
    ASSERT_TRUE(eng.ok()) << eng.status();
    engine_ = std::move(*eng);
    ASSERT_TRUE(engine_
                    ->register_handler(5,
                                       [&](Message& m) {
                                         std::uint32_t v;
                                         std::memcpy(&v, m.payload().data(), sizeof(v));
                                         delivered_.push_back(v);
                                         if (keep_) kept_.push_back(std::move(m));
                                       })
                    .ok());
  }
  void TearDown() override {
    kept_.clear();
    rogue_.stop();
    engine_.reset();
  }

  // Progresses both sides until `done` or 5 s.
  bool pump(const std::function<bool()>& done) { return pump_for(done, std::chrono::seconds(5)); }
  // Progresses both sides for a while, to show that nothing more happens.
  void settle() {
    pump_for([] { return false; }, std::chrono::milliseconds(200));
  }
  bool pump_for(const std::function<bool()>& done, Clock::duration limit) {
    auto deadline = Clock::now() + limit;
    while (!done()) {
      engine_->progress();
      rogue_.progress();
      if (Clock::now() > deadline) return false;
    }
    for (int i = 0; i < 200; ++i) {
      engine_->progress();
      rogue_.progress();
    }
    return true;
  }
  std::uint64_t stat(const char* name) { return engine_->stats().value(name); }

  // Engine sends to the rogue, which receives the engine's HELLO.
  wire::Hello expect_hello() {
    std::uint32_t v = 1;
    EXPECT_EQ(engine_->peer(1)->send(5, {}, std::as_bytes(std::span(&v, 1))), Result::kOk);
    EXPECT_TRUE(pump([&] { return !rogue_.received().empty(); }));
    Received r = rogue_.received().front();
    rogue_.received().pop_front();
    EXPECT_TRUE(r.header.flags & wire::kFlagCtrl);
    EXPECT_EQ(r.header.handler, wire::kHello);
    wire::Hello h{};
    EXPECT_EQ(wire::decode_hello(r.body, &h), wire::Parse::kOk);
    rogue_.set_key(h.rx_key);
    return h;
  }

  // The handshake with `credits` granted to the engine; message 1 (expect_hello's) is out.
  void ready(std::uint32_t credits) {
    expect_hello();
    rogue_.hello(credits);
    ASSERT_TRUE(pump([&] { return data().size() == 1; }));
  }
  // The data messages (handler 5) the rogue received, in arrival order.
  std::vector<Received> data() {
    std::vector<Received> out;
    for (const auto& r : rogue_.received())
      if (!(r.header.flags & wire::kFlagCtrl) && r.header.handler == 5) out.push_back(r);
    return out;
  }
  // Sends `v` (in `size` bytes) to the rogue on handler 5; with `track`, its completions are
  // recorded in done_[*track].
  Result send(std::uint32_t v, std::optional<std::size_t> track = std::nullopt, std::size_t size = sizeof(v)) {
    Bytes payload(size);
    std::memcpy(payload.data(), &v, sizeof(v));
    if (!track) return engine_->peer(1)->send_copy(5, payload);
    std::size_t i = *track;
    if (done_.size() <= i) done_.resize(i + 1);
    return engine_->peer(1)->send_copy(5, payload, [this, i](const absl::Status& s) { done_[i].push_back(s); });
  }

  Rogue rogue_;
  std::unique_ptr<Context> ctx_;
  std::unique_ptr<Engine> engine_;
  std::vector<std::uint32_t> delivered_;
  std::vector<Message> kept_;
  bool keep_ = false;
  std::vector<std::vector<absl::Status>> done_;  // each tracked send's completions
};

}  // namespace sluice::detail::rogue
