/* The C API's data paths on one engine talking to itself (rank 0 of a one-rank job): a
 * rendezvous payload landing in a handler's sink, a zero-copy send's completion, headers, a
 * kept message released later, a zero-copy reply with its completion and a call's reply
 * buffer; sends and replies from registered send slots (eager and rendezvous); counters by
 * name and by id, per-method and pool figures; two engines sharing one listening port. Each
 * check names what it expected. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sluice/sluice_c.h>

enum { kSunk = 1, kKept = 2, kEcho = 3, kSlot = 4, kSlotEcho = 5, kBig = 1 << 20 };

static int failures;

static void check(const char* what, int ok) {
  if (ok) return;
  fprintf(stderr, "loopback: %s (last error: %s)\n", what, slc_last_error());
  ++failures;
}

struct state {
  char* landing;       /* the sink's buffer */
  size_t sink_size;    /* what the sink was asked for */
  int sunk;            /* the kSunk handler saw its payload in the landing */
  int sent;            /* the zero-copy send's completion ran (with SLC_OK) */
  slc_msg_t* kept;     /* a kKept message, held past its handler */
  int replied;         /* the zero-copy reply's completion ran */
  int32_t call_status; /* the call's outcome, SLC_IN_PROGRESS before */
  size_t reply_size;
  const void* reply_at; /* where the reply's payload was */
  char reply_head[16];  /* its first bytes */
  char* echo;           /* the server's reply payload, sent zero-copy */
  slc_engine_t* engine;
  size_t slot_got;         /* kSlot: the size of the last payload */
  unsigned char slot_last; /* kSlot: its last byte */
  int slot_msgs;           /* kSlot messages delivered */
  int slot_sent;           /* slot sends and replies completed with SLC_OK */
  int want;                /* how many of each slots_in waits for */
  slc_mem_t* reply_mem;    /* kSlotEcho: the slot the reply went from, released once it completed */
};

static void* sink(const slc_msg_t* announcement, size_t size, void* user_data) {
  struct state* s = user_data;
  s->sink_size = size;
  (void)announcement;
  return size <= kBig ? s->landing : NULL;
}

static void on_sunk(slc_msg_t* msg, void* user_data) {
  struct state* s = user_data;
  size_t size = 0, hsize = 0;
  void* payload = slc_msg_payload(msg, &size);
  const char* header = slc_msg_header(msg, &hsize);
  check("the payload landed in the sink's buffer", payload == s->landing && size == kBig);
  check("its bytes", size == kBig && ((unsigned char*)payload)[kBig - 1] == 0xab);
  check("the header", hsize == 3 && memcmp(header, "hdr", 3) == 0);
  check("source 0", slc_msg_source(msg) == 0 && slc_msg_handler(msg) == kSunk && !slc_msg_is_request(msg));
  s->sunk = 1;
}

static void on_sent(int32_t status, void* user_data) { ((struct state*)user_data)->sent = status == SLC_OK ? 1 : -1; }

static void on_kept(slc_msg_t* msg, void* user_data) {
  struct state* s = user_data;
  check("keep", slc_msg_keep(msg, &s->kept) == SLC_OK);
  check("the handler's message is empty once kept", slc_msg_payload(msg, NULL) == NULL);
}

static void on_replied(int32_t status, void* user_data) { ((struct state*)user_data)->replied = status == SLC_OK; }

static void on_echo(slc_msg_t* msg, void* user_data) {
  struct state* s = user_data;
  slc_send_params_t p = SLC_SEND_PARAMS_INIT;
  p.field_mask = SLC_SEND_PARAM_CALLBACK;
  p.callback = on_replied;
  p.user_data = s;
  check("a request", slc_msg_is_request(msg) == 1);
  check("zero-copy reply", slc_msg_reply(msg, s->echo, kBig, &p) == SLC_OK);
  check("a second reply is refused", slc_msg_reply(msg, NULL, 0, NULL) == SLC_ERR_INVALID);
}

static void on_reply(int32_t status, slc_msg_t* reply, void* user_data) {
  struct state* s = user_data;
  s->reply_at = slc_msg_payload(reply, &s->reply_size);
  if (s->reply_at != NULL)
    memcpy(s->reply_head, s->reply_at, s->reply_size < sizeof s->reply_head ? s->reply_size : sizeof s->reply_head);
  s->call_status = status;
}

static void on_slot(slc_msg_t* msg, void* user_data) {
  struct state* s = user_data;
  unsigned char* payload = slc_msg_payload(msg, &s->slot_got);
  s->slot_last = payload == NULL ? 0 : payload[s->slot_got - 1];
  ++s->slot_msgs;
}

static void on_slot_sent(int32_t status, void* user_data) { ((struct state*)user_data)->slot_sent += status == SLC_OK; }

/* Answers from a slot of its own: "slot reply", kept until the reply's completion. */
static void on_slot_echo(slc_msg_t* msg, void* user_data) {
  struct state* s = user_data;
  slc_send_params_t p = SLC_SEND_PARAMS_INIT;
  p.field_mask = SLC_SEND_PARAM_CALLBACK;
  p.callback = on_replied;
  p.user_data = s;
  check("a reply slot", slc_engine_try_get_send_slot(s->engine, 64, &s->reply_mem) == SLC_OK);
  memcpy(slc_mem_data(s->reply_mem, NULL), "slot reply", 10);
  check("a reply beyond the slot is refused", slc_msg_reply_mem(msg, s->reply_mem, kBig, &p) == SLC_ERR_INVALID);
  p.field_mask |= SLC_SEND_PARAM_FLAGS;
  p.flags = SLC_SEND_FLAG_COPY;
  check("a slot reply takes no flags", slc_msg_reply_mem(msg, s->reply_mem, 10, &p) == SLC_ERR_INVALID);
  p.field_mask = SLC_SEND_PARAM_CALLBACK;
  check("reply from a slot", slc_msg_reply_mem(msg, s->reply_mem, 10, &p) == SLC_OK);
}

static int32_t sunk_and_sent(void* u) { return ((struct state*)u)->sunk && ((struct state*)u)->sent; }
static int32_t slots_in(void* u) {
  struct state* s = u;
  return s->slot_msgs >= s->want && s->slot_sent >= s->want;
}
static int32_t has_kept(void* u) { return ((struct state*)u)->kept != NULL; }
static int32_t answered(void* u) {
  return ((struct state*)u)->call_status != SLC_IN_PROGRESS && ((struct state*)u)->replied;
}

/* A slot of `size` bytes sent to kSlot, its last byte `last`; the caller still owns it after. */
static void send_slot(slc_engine_t* eng, slc_peer_t* self, struct state* s, size_t size, unsigned char last) {
  slc_mem_t* mem = NULL;
  size_t capacity = 0;
  unsigned char* data;
  slc_send_params_t p = SLC_SEND_PARAMS_INIT;
  p.field_mask = SLC_SEND_PARAM_CALLBACK;
  p.callback = on_slot_sent;
  p.user_data = s;
  check("a send slot", slc_engine_try_get_send_slot(eng, size, &mem) == SLC_OK);
  data = slc_mem_data(mem, &capacity);
  check("its memory holds the size asked", data != NULL && capacity >= size);
  if (data == NULL || capacity < size) return;
  memset(data, 0, size);
  data[size - 1] = last;
  ++s->want;
  check("send from the slot", slc_send_mem(self, kSlot, mem, size, &p) == SLC_OK);
  check("delivered from the slot", slc_engine_run_until(eng, slots_in, s, INT64_C(20000000000)) == SLC_OK);
  check("the payload's size and last byte", s->slot_got == size && s->slot_last == last);
  slc_mem_release(mem);
}

static void slots(slc_engine_t* eng, slc_peer_t* self, struct state* s) {
  check("register kSlot", slc_engine_register(eng, kSlot, on_slot, s, NULL) == SLC_OK);
  check("register kSlotEcho", slc_engine_register(eng, kSlotEcho, on_slot_echo, s, NULL) == SLC_OK);
  send_slot(eng, self, s, 40, 0x11);         /* eager */
  send_slot(eng, self, s, 256 * 1024, 0x22); /* rendezvous, with the slot's registration */
  s->call_status = SLC_IN_PROGRESS;
  s->replied = 0;
  check("call kSlotEcho", slc_call(self, kSlotEcho, NULL, 0, NULL, on_reply, s, NULL) == SLC_OK);
  check("answered from a slot", slc_engine_run_until(eng, answered, s, INT64_C(20000000000)) == SLC_OK);
  check("the slot reply",
        s->call_status == SLC_OK && s->reply_size == 10 && memcmp(s->reply_head, "slot reply", 10) == 0);
  slc_mem_release(s->reply_mem); /* its reply completed (answered) */
}

/* Counters by name and by id agree, an id keeps naming its counter, and ids list them all. */
static void counters(slc_engine_t* eng, slc_peer_t* self, struct state* s) {
  uint32_t id = 0, i = 0;
  uint64_t by_name = 0, before = 0, after = 0;
  const char* name = NULL;
  size_t length = 0;
  int listed = 0;
  check("stat_id am.msgs_sent", slc_engine_stat_id(eng, "am.msgs_sent", 12, &id) == SLC_OK);
  check("by id", slc_engine_stat_by_id(eng, id, &before) == SLC_OK);
  check("by name, the same", slc_engine_stat(eng, "am.msgs_sent", 12, &by_name) == SLC_OK && by_name == before);
  send_slot(eng, self, s, 8, 0x33);
  check("by id, one message later", slc_engine_stat_by_id(eng, id, &after) == SLC_OK && after == before + 1);
  check("its name", slc_engine_stat_name(eng, id, &name, &length) == SLC_OK && length == 12 &&
                        memcmp(name, "am.msgs_sent", 12) == 0);
  for (i = 0; slc_engine_stat_name(eng, i, &name, &length) == SLC_OK; ++i)
    listed += length == 12 && memcmp(name, "am.msgs_sent", 12) == 0;
  check("ids from 0 list every counter, this one once", listed == 1 && i > id);
}

/* After one kEcho call: its figures as client and server, and the send pool's. */
static void figures(slc_engine_t* eng) {
  slc_method_stats_t ms = SLC_METHOD_STATS_INIT;
  slc_pool_stats_t ps = SLC_POOL_STATS_INIT;
  slc_pool_class_stats_t cs = SLC_POOL_CLASS_STATS_INIT;
  uint32_t i, named = 0;
  ms.field_mask = SLC_METHOD_STATS_FIELD_COUNTS;
  ms.p50_ns = -7;
  check("kEcho served once", slc_engine_method_stats(eng, kEcho, 1, &ms) == SLC_OK && ms.calls == 1 && ms.errors == 0);
  check("fields not asked for are left alone", ms.p50_ns == -7);
  ms.field_mask = SLC_METHOD_STATS_FIELD_COUNTS | SLC_METHOD_STATS_FIELD_LATENCY;
  check("kEcho called once, its latency measured", slc_engine_method_stats(eng, kEcho, 0, &ms) == SLC_OK &&
                                                       ms.calls == 1 && ms.timed == 1 && ms.max_ns > 0 &&
                                                       ms.p50_ns <= ms.max_ns);
  ps.field_mask = SLC_POOL_STATS_FIELD_BYTES | SLC_POOL_STATS_FIELD_CLASSES;
  check("the send pool", slc_engine_pool_stats(eng, SLC_POOL_SEND, &ps) == SLC_OK && ps.budget_bytes > 0 &&
                             ps.mapped_bytes > 0 && ps.high_water_bytes > 0 && ps.classes > 0);
  cs.field_mask = SLC_POOL_CLASS_FIELD_NAME | SLC_POOL_CLASS_FIELD_SLOTS;
  for (i = 0; i < ps.classes; ++i)
    named += slc_engine_pool_class_stats(eng, SLC_POOL_SEND, i, &cs) == SLC_OK && strncmp(cs.name, "send.", 5) == 0 &&
             cs.slots_free <= cs.slots_total;
  check("each send class named send.*", named == ps.classes);
  check("none past the last", slc_engine_pool_class_stats(eng, SLC_POOL_SEND, ps.classes, &cs) == SLC_ERR_NOT_FOUND);
}

/* share_port: a second engine listens on the first one's port; one without it cannot. */
static void shared_port(slc_context_t* ctx, slc_engine_t* eng) {
  slc_engine_t* second = NULL;
  slc_engine_t* third = NULL;
  slc_listen_params_t lp = SLC_LISTEN_PARAMS_INIT;
  int32_t port = 0, again = 0;
  char where[32];
  lp.field_mask = SLC_LISTEN_PARAM_SHARE_PORT;
  lp.share_port = 1;
  check("listen, port shared", slc_engine_listen(eng, "127.0.0.1:0", 11, &lp, &port) == SLC_OK && port > 0);
  snprintf(where, sizeof where, "127.0.0.1:%d", (int)port);
  check("two more engines",
        slc_engine_create(ctx, NULL, &second) == SLC_OK && slc_engine_create(ctx, NULL, &third) == SLC_OK);
  check("a second engine shares the port",
        slc_engine_listen(second, where, strlen(where), &lp, &again) == SLC_OK && again == port);
  check("one without share_port cannot bind it",
        slc_engine_listen(third, where, strlen(where), NULL, &again) == SLC_ERR_UNAVAILABLE);
  slc_engine_destroy(third);
  slc_engine_destroy(second);
}

int main(void) {
  struct state s;
  slc_context_t* ctx = NULL;
  slc_engine_t* eng = NULL;
  slc_peer_t* self = NULL;
  char* big = malloc(kBig);
  char* landing = malloc(kBig);
  slc_handler_params_t hp = SLC_HANDLER_PARAMS_INIT;
  slc_send_params_t sp = SLC_SEND_PARAMS_INIT;
  slc_call_params_t cp = SLC_CALL_PARAMS_INIT;
  size_t size = 0;
  memset(&s, 0, sizeof s);
  s.call_status = SLC_IN_PROGRESS;
  s.landing = calloc(kBig, 1);
  s.echo = malloc(kBig);
  memset(big, 0xab, kBig);
  memset(s.echo, 0x5c, kBig);
  if (slc_init() != SLC_OK || slc_context_create(NULL, &ctx) != SLC_OK ||
      slc_engine_create(ctx, NULL, &eng) != SLC_OK || slc_engine_peer(eng, 0, &self) != SLC_OK) {
    fprintf(stderr, "loopback: setup: %s\n", slc_last_error());
    return 1;
  }
  hp.field_mask = SLC_HANDLER_PARAM_SINK | SLC_HANDLER_PARAM_UNORDERED;
  hp.sink = sink;
  hp.unordered = 1;
  check("register with a sink", slc_engine_register(eng, kSunk, on_sunk, &s, &hp) == SLC_OK);
  check("register kKept", slc_engine_register(eng, kKept, on_kept, &s, NULL) == SLC_OK);
  check("register kEcho", slc_engine_register(eng, kEcho, on_echo, &s, NULL) == SLC_OK);
  check("a payload above the eager limit", slc_engine_eager_limit(eng) < kBig);

  sp.field_mask = SLC_SEND_PARAM_HEADER | SLC_SEND_PARAM_CALLBACK;
  sp.header = "hdr";
  sp.header_size = 3;
  sp.callback = on_sent;
  sp.user_data = &s;
  check("zero-copy send", slc_send(self, kSunk, big, kBig, &sp) == SLC_OK);
  check("its completion never runs inside the send", s.sent == 0);
  check("sunk and sent", slc_engine_run_until(eng, sunk_and_sent, &s, INT64_C(20000000000)) == SLC_OK);
  check("the sink was asked for the payload's size", s.sink_size == kBig);
  check("the completion said OK", s.sent == 1);

  check("copied send", slc_send(self, kKept, "keep me", 7, NULL) == SLC_OK);
  check("kept", slc_engine_run_until(eng, has_kept, &s, INT64_C(10000000000)) == SLC_OK);
  check("a kept message's payload", s.kept != NULL && slc_msg_payload(s.kept, &size) != NULL && size == 7);
  slc_msg_release(s.kept);

  cp.field_mask = SLC_CALL_PARAM_REPLY_BUFFER | SLC_CALL_PARAM_TIMEOUT;
  cp.reply_buffer = landing;
  cp.reply_buffer_size = kBig;
  cp.timeout_ns = INT64_C(20000000000);
  check("call", slc_call(self, kEcho, "q", 1, &cp, on_reply, &s, NULL) == SLC_OK);
  check("answered", slc_engine_run_until(eng, answered, &s, INT64_C(20000000000)) == SLC_OK);
  check("the call succeeded", s.call_status == SLC_OK);
  check("the reply landed in the reply buffer", s.reply_at == landing && s.reply_size == kBig);
  check("its bytes", ((unsigned char*)landing)[kBig - 1] == 0x5c);
  figures(eng);
  s.engine = eng;
  slots(eng, self, &s);
  counters(eng, self, &s);
  shared_port(ctx, eng);
  slc_engine_destroy(eng);
  slc_context_destroy(ctx);
  free(big), free(landing), free(s.landing), free(s.echo);
  if (failures == 0)
    printf("loopback: sink, zero-copy send and reply, keep, reply buffer, slots, stats, shared port as documented\n");
  return failures == 0 ? 0 : 1;
}
