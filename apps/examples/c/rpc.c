/* rpc (C): a server answers calls, a client makes them: echoes (copied and into a reply
 * buffer), an error reply, a deadline, a cancel, then a stop.
 *
 *   build/apps/sluice-run -n 2 build/apps/examples/rpc_c        rank 0 serves, rank 1 calls
 *   rpc_c listen 127.0.0.1:0        serves client/server (prints "listening on PORT")
 *   rpc_c connect 127.0.0.1:PORT    calls it
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sluice/sluice_c.h>

enum { kEcho = 10, kFail = 11, kHold = 12, kStop = 13, kCalls = 100 };

struct server {
  slc_msg_t* held[4]; /* kHold requests, answered only at the stop */
  int nheld, stop;
};

static void serve(slc_msg_t* msg, void* user_data) {
  struct server* s = user_data;
  size_t size = 0;
  void* payload = slc_msg_payload(msg, &size);
  slc_send_params_t copy = SLC_SEND_PARAMS_INIT;
  copy.field_mask = SLC_SEND_PARAM_FLAGS;
  copy.flags = SLC_SEND_FLAG_COPY;
  switch (slc_msg_handler(msg)) {
    case kEcho: slc_msg_reply(msg, payload, size, &copy); break;
    case kFail: slc_msg_reply_error(msg, SLC_ERR_NOT_FOUND, "no such block", 13); break;
    case kHold:
      if (s->nheld < 4 && slc_msg_keep(msg, &s->held[s->nheld]) == SLC_OK) ++s->nheld;
      else slc_msg_reply_error(msg, SLC_ERR_REFUSED, "holding too many", 16);
      break;
    case kStop:
      for (; s->nheld > 0; --s->nheld) {
        slc_msg_reply(s->held[s->nheld - 1], NULL, 0, &copy);
        slc_msg_release(s->held[s->nheld - 1]);
      }
      slc_msg_reply(msg, NULL, 0, &copy);
      s->stop = 1;
      break;
  }
}

struct reply {
  int32_t status;
  int done;
  size_t size;
  char data[64];
};

static void on_reply(int32_t status, slc_msg_t* msg, void* user_data) {
  struct reply* r = user_data;
  void* payload = slc_msg_payload(msg, &r->size);
  r->status = status;
  if (payload != NULL && r->size <= sizeof r->data) memcpy(r->data, payload, r->size);
  r->done = 1;
}

static int32_t reply_done(void* user_data) { return ((struct reply*)user_data)->done; }
static int32_t server_done(void* user_data) { return ((struct server*)user_data)->stop; }

/* One call; its reply lands in *r. Returns slc_call's status, or the reply's. */
static int32_t call(slc_engine_t* eng, slc_peer_t* peer, uint16_t method, const char* text,
                    const slc_call_params_t* params, struct reply* r, slc_request_t** id, int cancel) {
  int32_t st;
  memset(r, 0, sizeof *r);
  do {
    st = slc_call(peer, method, text, text == NULL ? 0 : strlen(text), params, on_reply, r, id);
  } while (st == SLC_ERR_WOULD_BLOCK && slc_engine_progress(eng) >= 0);
  if (st != SLC_OK) return st;
  if (cancel) slc_engine_cancel(eng, *id);
  st = slc_engine_run_until(eng, reply_done, r, INT64_C(10000000000));
  return st != SLC_OK ? st : r->status;
}

static int check(const char* what, int32_t got, int32_t want) {
  if (got == want) return 0;
  fprintf(stderr, "rpc_c: %s: got %s, want %s (%s)\n", what, slc_strerror(got), slc_strerror(want), slc_last_error());
  return 1;
}

static int client(slc_engine_t* eng, slc_peer_t* peer) {
  struct reply r;
  slc_request_t* id = NULL;
  char landing[64];
  int i, bad = 0;
  slc_call_params_t p = SLC_CALL_PARAMS_INIT;
  for (i = 0; i < kCalls && !bad; ++i) {
    bad |= check("echo", call(eng, peer, kEcho, "hello", NULL, &r, &id, 0), SLC_OK);
    if (!bad && (r.size != 5 || memcmp(r.data, "hello", 5) != 0))
      bad = check("echo payload", SLC_ERR_DATA_LOSS, SLC_OK);
  }
  p.field_mask = SLC_CALL_PARAM_REPLY_BUFFER | SLC_CALL_PARAM_TIMEOUT;
  p.reply_buffer = landing;
  p.reply_buffer_size = sizeof landing;
  p.timeout_ns = INT64_C(5000000000);
  bad |= check("echo into a reply buffer", call(eng, peer, kEcho, "landed", &p, &r, &id, 0), SLC_OK);
  if (!bad && memcmp(landing, "landed", 6) != 0) bad = check("reply buffer", SLC_ERR_DATA_LOSS, SLC_OK);
  bad |= check("error reply", call(eng, peer, kFail, NULL, NULL, &r, &id, 0), SLC_ERR_NOT_FOUND);
  if (!bad && strstr(slc_last_error(), "no such block") == NULL) bad = check("error text", SLC_ERR_DATA_LOSS, SLC_OK);
  bad |= check("unknown method", call(eng, peer, 99, NULL, NULL, &r, &id, 0), SLC_ERR_UNIMPLEMENTED);
  p.field_mask = SLC_CALL_PARAM_TIMEOUT;
  p.timeout_ns = INT64_C(50000000);
  bad |= check("deadline", call(eng, peer, kHold, NULL, &p, &r, &id, 0), SLC_ERR_DEADLINE);
  bad |= check("cancel", call(eng, peer, kHold, NULL, NULL, &r, &id, 1), SLC_ERR_CANCELLED);
  bad |= check("stop", call(eng, peer, kStop, NULL, NULL, &r, &id, 0), SLC_OK);
  if (!bad) printf("rpc_c: %d calls answered, error, deadline and cancel as expected\n", kCalls + 1);
  return bad;
}

static int fail(const char* what, int32_t status) {
  fprintf(stderr, "rpc_c: %s: %s (%s)\n", what, slc_strerror(status), slc_last_error());
  return 1;
}

static int server(slc_engine_t* eng) {
  struct server s = {{NULL}, 0, 0};
  uint16_t methods[] = {kEcho, kFail, kHold, kStop};
  size_t i;
  int32_t r;
  for (i = 0; i < sizeof methods / sizeof methods[0]; ++i)
    if ((r = slc_engine_register(eng, methods[i], serve, &s, NULL)) != SLC_OK) return fail("register", r);
  if (slc_engine_rank(eng) >= 0 && slc_engine_size(eng) > 1) slc_engine_barrier(eng, SLC_TIMEOUT_INFINITE);
  slc_engine_run_until(eng, server_done, &s, INT64_C(60000000000));
  if (!s.stop) return fail("serve", SLC_ERR_DEADLINE);
  return 0;
}

int main(int argc, char** argv) {
  slc_context_t* ctx = NULL;
  slc_engine_t* eng = NULL;
  slc_peer_t* peer = NULL;
  int32_t r, port = 0;
  int rc;
  if ((r = slc_init()) != SLC_OK) return fail("init", r);
  if ((r = slc_context_create(NULL, &ctx)) != SLC_OK) return fail("context", r);
  if ((r = slc_engine_create(ctx, NULL, &eng)) != SLC_OK) return fail("engine", r);
  if (argc > 2 && strcmp(argv[1], "listen") == 0) {
    if ((r = slc_engine_listen(eng, argv[2], strlen(argv[2]), NULL, &port)) != SLC_OK) return fail("listen", r);
    printf("listening on %d\n", port);
    fflush(stdout);
    rc = server(eng);
  } else if (argc > 2 && strcmp(argv[1], "connect") == 0) {
    if ((r = slc_engine_connect(eng, argv[2], strlen(argv[2]), 0, &peer)) != SLC_OK) return fail("connect", r);
    rc = client(eng, peer);
  } else if (slc_engine_size(eng) == 2) {
    if (slc_engine_rank(eng) == 0) {
      rc = server(eng);
    } else {
      if ((r = slc_engine_peer(eng, 0, &peer)) != SLC_OK) return fail("peer", r);
      slc_engine_barrier(eng, SLC_TIMEOUT_INFINITE);
      rc = client(eng, peer);
    }
  } else {
    fprintf(stderr, "rpc_c: run with two ranks, or as listen ADDR / connect ADDR\n");
    rc = 1;
  }
  slc_engine_destroy(eng);
  slc_context_destroy(ctx);
  return rc;
}
