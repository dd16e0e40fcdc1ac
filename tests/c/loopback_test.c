/* The C API's data paths on one engine talking to itself (rank 0 of a one-rank job): a
 * rendezvous payload landing in a handler's sink, a zero-copy send's completion, headers, a
 * kept message released later, a zero-copy reply with its completion and a call's reply
 * buffer. Each check names what it expected. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sluice/sluice_c.h>

enum { kSunk = 1, kKept = 2, kEcho = 3, kBig = 1 << 20 };

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
  char* echo;           /* the server's reply payload, sent zero-copy */
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
  s->call_status = status;
}

static int32_t sunk_and_sent(void* u) { return ((struct state*)u)->sunk && ((struct state*)u)->sent; }
static int32_t has_kept(void* u) { return ((struct state*)u)->kept != NULL; }
static int32_t answered(void* u) {
  return ((struct state*)u)->call_status != SLC_IN_PROGRESS && ((struct state*)u)->replied;
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
  slc_engine_destroy(eng);
  slc_context_destroy(ctx);
  free(big), free(landing), free(s.landing), free(s.echo);
  if (failures == 0) printf("loopback: sink, zero-copy send and reply, keep, reply buffer as documented\n");
  return failures == 0 ? 0 : 1;
}
