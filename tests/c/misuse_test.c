/* The C API under misuse: every entry point with NULLs, bad sizes, unknown field_mask bits
 * and flags, the wrong order, and calls that are not allowed inside a callback. Each must
 * return its documented status (with a detail) and not crash; then a real engine shows the
 * same calls working on its own peer (rank 0 of a one-rank job). */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <sluice/sluice_c.h>

static int failures;

static int32_t reached(void* user_data) { return ((int*)user_data)[0] >= ((int*)user_data)[1]; }

static void expect(const char* what, int32_t got, int32_t want) {
  if (got == want && (want >= 0 || slc_last_error()[0] != '\0')) return;
  fprintf(stderr, "misuse: %s: got %d (%s), want %d; detail \"%s\"\n", what, got, slc_strerror(got), want,
          slc_last_error());
  ++failures;
}

/* A plain value, no status: no detail to check. */
static void same(const char* what, long long got, long long want) {
  if (got == want) return;
  fprintf(stderr, "misuse: %s: got %lld, want %lld\n", what, got, want);
  ++failures;
}

static void on_msg(slc_msg_t* msg, void* user_data) {
  int* count = user_data;
  size_t size = 0;
  const void* payload = slc_msg_payload(msg, &size);
  slc_engine_t* eng = NULL;
  ++*count;
  /* A payload carrying the engine: calls not allowed inside a handler are refused. */
  if (size != sizeof eng) return;
  memcpy(&eng, payload, sizeof eng);
  expect("progress in a handler", slc_engine_progress(eng), SLC_ERR_INVALID);
  expect("run_until in a handler", slc_engine_run_until(eng, reached, count, 0), SLC_ERR_INVALID);
  expect("register in a handler", slc_engine_register(eng, 3, on_msg, NULL, NULL), SLC_ERR_INVALID);
}

static void on_reply(int32_t status, slc_msg_t* reply, void* user_data) {
  (void)reply;
  *(int32_t*)user_data = status;
}
static int32_t replied(void* user_data) { return *(int32_t*)user_data != SLC_IN_PROGRESS; }

static void give_back(const slc_msg_t* msg, void* buffer, size_t size, void* user_data) {
  (void)msg, (void)buffer, (void)size, (void)user_data;
}

/* The entry points of C API 1.0 with NULLs (`eng` and `peer` are not real handles: each call
 * must refuse its NULL before it looks at them). */
static void nulls_new(slc_engine_t* eng, slc_peer_t* peer) {
  slc_mem_t* mem = (slc_mem_t*)&failures;
  slc_method_stats_t ms = SLC_METHOD_STATS_INIT;
  slc_pool_stats_t ps = SLC_POOL_STATS_INIT;
  slc_pool_class_stats_t cs = SLC_POOL_CLASS_STATS_INIT;
  const char* name = "x";
  uint32_t id = 0;
  uint64_t value = 0;
  size_t size = 7;
  expect("try_get_send_slot(NULL)", slc_engine_try_get_send_slot(NULL, 64, &mem), SLC_ERR_INVALID);
  expect("try_get_send_slot set NULL", mem == NULL ? SLC_OK : SLC_ERR_INVALID, SLC_OK);
  expect("try_get_send_slot(NULL out)", slc_engine_try_get_send_slot(eng, 64, NULL), SLC_ERR_INVALID);
  expect("mem_data(NULL)", slc_mem_data(NULL, &size) == NULL && size == 0 ? SLC_OK : SLC_ERR_INVALID, SLC_OK);
  slc_mem_release(NULL);
  expect("send_mem(NULL peer)", slc_send_mem(NULL, 1, mem, 0, NULL), SLC_ERR_INVALID);
  expect("send_mem(NULL slot)", slc_send_mem(peer, 1, NULL, 0, NULL), SLC_ERR_INVALID);
  expect("reply_mem(NULL)", slc_msg_reply_mem(NULL, mem, 0, NULL), SLC_ERR_INVALID);
  expect("reply_mem(foreign)", slc_msg_reply_mem((slc_msg_t*)"not a message handle....", mem, 0, NULL),
         SLC_ERR_INVALID);
  expect("cancel(NULL request)", slc_engine_cancel(eng, NULL), SLC_ERR_INVALID);
  expect("stat_id(NULL)", slc_engine_stat_id(NULL, "x", 1, &id), SLC_ERR_INVALID);
  expect("stat_id(NULL id)", slc_engine_stat_id(eng, "x", 1, NULL), SLC_ERR_INVALID);
  expect("stat_by_id(NULL)", slc_engine_stat_by_id(NULL, 0, &value), SLC_ERR_INVALID);
  expect("stat_by_id(NULL value)", slc_engine_stat_by_id(eng, 0, NULL), SLC_ERR_INVALID);
  expect("stat_name(NULL)", slc_engine_stat_name(NULL, 0, &name, &size), SLC_ERR_INVALID);
  expect("stat_name set NULL", name == NULL ? SLC_OK : SLC_ERR_INVALID, SLC_OK);
  expect("stat_name(NULL name)", slc_engine_stat_name(eng, 0, NULL, &size), SLC_ERR_INVALID);
  expect("method_stats(NULL)", slc_engine_method_stats(NULL, 1, 0, &ms), SLC_ERR_INVALID);
  expect("method_stats(NULL out)", slc_engine_method_stats(eng, 1, 0, NULL), SLC_ERR_INVALID);
  expect("pool_stats(NULL)", slc_engine_pool_stats(NULL, SLC_POOL_SEND, &ps), SLC_ERR_INVALID);
  expect("pool_stats(NULL out)", slc_engine_pool_stats(eng, SLC_POOL_SEND, NULL), SLC_ERR_INVALID);
  expect("pool_class_stats(NULL)", slc_engine_pool_class_stats(NULL, SLC_POOL_SEND, 0, &cs), SLC_ERR_INVALID);
  expect("pool_class_stats(NULL out)", slc_engine_pool_class_stats(eng, SLC_POOL_SEND, 0, NULL), SLC_ERR_INVALID);
}

static void nulls(void) {
  slc_context_t* ctx = (slc_context_t*)&failures;
  slc_engine_t* eng = (slc_engine_t*)&failures;
  slc_peer_t* peer = (slc_peer_t*)&failures;
  slc_msg_t* msg = (slc_msg_t*)&failures;
  int32_t port = 0;
  uint64_t value = 0;
  size_t size = 7;
  expect("context_create(NULL out)", slc_context_create(NULL, NULL), SLC_ERR_INVALID);
  expect("context_create before init", slc_context_create(NULL, &ctx), SLC_ERR_NOT_INITIALIZED);
  expect("ctx set to NULL", ctx == NULL ? SLC_OK : SLC_ERR_INVALID, SLC_OK);
  expect("init_version(0, 1), the unreleased development API", slc_init_version(0, 1), SLC_ERR_VERSION);
  expect("init_version(2, 0)", slc_init_version(2, 0), SLC_ERR_VERSION);
  expect("init_version(1, 99)", slc_init_version(1, 99), SLC_ERR_VERSION);
  slc_context_destroy(NULL);
  same("context_rank(NULL)", slc_context_rank(NULL), -1);
  same("context_size(NULL)", slc_context_size(NULL), -1);
  expect("engine_create(NULL)", slc_engine_create(NULL, NULL, &eng), SLC_ERR_INVALID);
  expect("engine_create(NULL out)", slc_engine_create(NULL, NULL, NULL), SLC_ERR_INVALID);
  slc_engine_destroy(NULL);
  same("engine_rank(NULL)", slc_engine_rank(NULL), -1);
  same("engine_size(NULL)", slc_engine_size(NULL), -1);
  same("eager_limit(NULL)", (long long)slc_engine_eager_limit(NULL), 0);
  expect("engine_peer(NULL)", slc_engine_peer(NULL, 0, &peer), SLC_ERR_INVALID);
  expect("engine_peer(NULL out)", slc_engine_peer(NULL, 0, NULL), SLC_ERR_INVALID);
  expect("listen(NULL)", slc_engine_listen(NULL, "127.0.0.1:0", 11, NULL, &port), SLC_ERR_INVALID);
  expect("connect(NULL)", slc_engine_connect(NULL, "127.0.0.1:1", 11, 0, &peer), SLC_ERR_INVALID);
  same("peer_rank(NULL)", slc_peer_rank(NULL), -1);
  expect("peer_id(NULL)", slc_peer_id(NULL) == UINT32_MAX ? SLC_OK : SLC_ERR_INVALID, SLC_OK);
  same("peer_alive(NULL)", slc_peer_alive(NULL), 0);
  expect("register(NULL)", slc_engine_register(NULL, 1, on_msg, NULL, NULL), SLC_ERR_INVALID);
  expect("unregister(NULL)", slc_engine_unregister(NULL, 1), SLC_ERR_INVALID);
  same("msg_source(NULL)", slc_msg_source(NULL), -1);
  same("msg_handler(NULL)", slc_msg_handler(NULL), 0);
  same("msg_is_request(NULL)", slc_msg_is_request(NULL), 0);
  expect("msg_header(NULL)", slc_msg_header(NULL, &size) == NULL && size == 0 ? SLC_OK : SLC_ERR_INVALID, SLC_OK);
  expect("msg_payload(NULL)", slc_msg_payload(NULL, NULL) == NULL ? SLC_OK : SLC_ERR_INVALID, SLC_OK);
  expect("msg_keep(NULL)", slc_msg_keep(NULL, &msg), SLC_ERR_INVALID);
  /* A pointer that is not a message handle (its first words are not a handle's) is refused. */
  expect("msg_keep(foreign)", slc_msg_keep((slc_msg_t*)"not a message handle....", &msg), SLC_ERR_INVALID);
  slc_msg_release(NULL);
  expect("send(NULL)", slc_send(NULL, 1, NULL, 0, NULL), SLC_ERR_INVALID);
  expect("call(NULL)", slc_call(NULL, 1, NULL, 0, NULL, on_reply, NULL, NULL), SLC_ERR_INVALID);
  expect("cancel(NULL)", slc_engine_cancel(NULL, (slc_request_t*)&failures), SLC_ERR_INVALID);
  expect("reply(NULL)", slc_msg_reply(NULL, NULL, 0, NULL), SLC_ERR_INVALID);
  expect("reply_error(NULL)", slc_msg_reply_error(NULL, SLC_ERR_INTERNAL, NULL, 0), SLC_ERR_INVALID);
  expect("progress(NULL)", slc_engine_progress(NULL), SLC_ERR_INVALID);
  expect("run_until(NULL)", slc_engine_run_until(NULL, reached, NULL, 0), SLC_ERR_INVALID);
  expect("wait(NULL)", slc_engine_wait(NULL, 0), SLC_ERR_INVALID);
  expect("post(NULL)", slc_engine_post(NULL, NULL, NULL), SLC_ERR_INVALID);
  expect("barrier(NULL)", slc_engine_barrier(NULL, 0), SLC_ERR_INVALID);
  expect("release_thread(NULL)", slc_engine_release_thread(NULL), SLC_ERR_INVALID);
  expect("stat(NULL)", slc_engine_stat(NULL, "x", 1, &value), SLC_ERR_INVALID);
  nulls_new(eng, peer);
  same("strerror(12345) is named unknown", strcmp(slc_strerror(12345), "unknown Sluice status code"), 0);
}

static void bad_params(void) {
  slc_context_t* ctx = NULL;
  slc_context_params_t cp = SLC_CONTEXT_PARAMS_INIT;
  cp.field_mask = UINT64_C(1) << 40;
  expect("context mask bit 40", slc_context_create(&cp, &ctx), SLC_ERR_INVALID);
  expect("names the bits", strstr(slc_last_error(), "0x10000000000") != NULL ? SLC_OK : SLC_ERR_INVALID, SLC_OK);
  cp.field_mask = SLC_CONTEXT_PARAM_CONFIG;
  cp.config = "SLUICE_CREDITS=lots";
  cp.config_length = strlen(cp.config);
  expect("bad config value", slc_context_create(&cp, &ctx), SLC_ERR_INVALID);
  expect("names it", strstr(slc_last_error(), "SLUICE_CREDITS") != NULL ? SLC_OK : SLC_ERR_INVALID, SLC_OK);
  cp.config = "credits 4";
  cp.config_length = strlen(cp.config);
  expect("config line without =", slc_context_create(&cp, &ctx), SLC_ERR_INVALID);
  cp.config = NULL;
  cp.config_length = 3;
  expect("NULL config with a length", slc_context_create(&cp, &ctx), SLC_ERR_INVALID);
}

static void sends(slc_engine_t* eng, slc_peer_t* self) {
  char big[SLC_MAX_HEADER + 1];
  int count[2] = {0, 0};
  int32_t status = SLC_IN_PROGRESS, r = SLC_OK;
  int immediate = 0;
  uint64_t value = 0;
  slc_send_params_t sp = SLC_SEND_PARAMS_INIT;
  slc_call_params_t kp = SLC_CALL_PARAMS_INIT;
  slc_handler_params_t hp = SLC_HANDLER_PARAMS_INIT;
  expect("register id 1024", slc_engine_register(eng, SLC_MAX_HANDLERS, on_msg, count, NULL), SLC_ERR_INVALID);
  hp.field_mask = SLC_HANDLER_PARAM_SINK_RELEASE;
  hp.sink_release = give_back;
  expect("sink_release without sink", slc_engine_register(eng, 1, on_msg, count, &hp), SLC_ERR_INVALID);
  expect("register", slc_engine_register(eng, 1, on_msg, count, NULL), SLC_OK);
  expect("register twice", slc_engine_register(eng, 1, on_msg, count, NULL), SLC_ERR_ALREADY_EXISTS);
  expect("unregister unknown", slc_engine_unregister(eng, 2), SLC_ERR_NOT_FOUND);
  expect("send NULL payload, size 5", slc_send(self, 1, NULL, 5, NULL), SLC_ERR_INVALID);
  sp.field_mask = SLC_SEND_PARAM_HEADER;
  sp.header = big;
  sp.header_size = sizeof big;
  memset(big, 0, sizeof big);
  expect("header above SLC_MAX_HEADER", slc_send(self, 1, NULL, 0, &sp), SLC_ERR_INVALID);
  sp.header = NULL;
  sp.header_size = 4;
  expect("NULL header, size 4", slc_send(self, 1, NULL, 0, &sp), SLC_ERR_INVALID);
  sp.field_mask = SLC_SEND_PARAM_FLAGS;
  sp.flags = 1u << 7;
  expect("unknown send flag", slc_send(self, 1, NULL, 0, &sp), SLC_ERR_INVALID);
  sp.field_mask = UINT64_C(1) << 9;
  expect("unknown send mask bit", slc_send(self, 1, NULL, 0, &sp), SLC_ERR_INVALID);
  /* The payload carries the engine, for the handler's refused progress() call. */
  sp.field_mask = SLC_SEND_PARAM_FLAGS;
  sp.flags = SLC_SEND_FLAG_IMMEDIATE | SLC_SEND_FLAG_COPY;
  /* The first message to a new peer starts its handshake; the next wait for it. */
  expect("first immediate send", slc_send(self, 1, &eng, sizeof eng, &sp), SLC_OK);
  expect("immediate during the handshake", slc_send(self, 1, &eng, sizeof eng, &sp), SLC_ERR_WOULD_BLOCK);
  count[1] = 1;
  expect("first delivered", slc_engine_run_until(eng, reached, count, INT64_C(10000000000)), SLC_OK);
  /* Connected: immediate sends leave while credits last (SLUICE_CREDITS), then would-block,
   * where a plain send is still queued. */
  while (immediate < 10000 && (r = slc_send(self, 1, &eng, sizeof eng, &sp)) == SLC_OK) ++immediate;
  expect("immediate sends stop with would-block", r, SLC_ERR_WOULD_BLOCK);
  expect("more than one credit's worth", immediate > 1 && immediate < 10000 ? SLC_OK : SLC_ERR_INVALID, SLC_OK);
  printf("misuse: %d immediate sends left before the first would-block\n", immediate);
  expect("queued send still accepted", slc_send(self, 1, NULL, 0, NULL), SLC_OK);
  count[1] = 1 + immediate + 1;
  expect("all delivered", slc_engine_run_until(eng, reached, count, INT64_C(10000000000)), SLC_OK);
  expect("stat am.msgs_sent", slc_engine_stat(eng, "am.msgs_sent", 12, &value), SLC_OK);
  expect("stat unknown", slc_engine_stat(eng, "am.no_such", 10, &value), SLC_ERR_NOT_FOUND);
  expect("stat NULL name, length 3", slc_engine_stat(eng, NULL, 3, &value), SLC_ERR_INVALID);
  expect("call without on_reply", slc_call(self, 5, NULL, 0, NULL, NULL, NULL, NULL), SLC_ERR_INVALID);
  kp.field_mask = SLC_CALL_PARAM_REPLY_BUFFER;
  kp.reply_buffer_size = 8;
  expect("NULL reply buffer, size 8", slc_call(self, 5, NULL, 0, &kp, on_reply, &status, NULL), SLC_ERR_INVALID);
  expect("call unregistered method", slc_call(self, 5, NULL, 0, NULL, on_reply, &status, NULL), SLC_OK);
  slc_engine_run_until(eng, replied, &status, INT64_C(10000000000));
  expect("its reply", status, SLC_ERR_UNIMPLEMENTED);
  expect("listen on a bad address", slc_engine_listen(eng, "nowhere", 7, NULL, &r), SLC_ERR_INVALID);
  expect("listen NULL with a length", slc_engine_listen(eng, NULL, 3, NULL, &r), SLC_ERR_INVALID);
  expect("connect to a closed port", slc_engine_connect(eng, "127.0.0.1:1", 11, 0, &self), SLC_ERR_UNAVAILABLE);
  expect("run_until deadline", slc_engine_run_until(eng, replied, &(int32_t){SLC_IN_PROGRESS}, 1000), SLC_ERR_DEADLINE);
}

/* C API 1.0's calls on a real engine: bad sizes, directions, ids, mask bits and flags. */
static void new_calls(slc_engine_t* eng, slc_peer_t* self) {
  slc_mem_t* mem = NULL;
  slc_listen_params_t lp = SLC_LISTEN_PARAMS_INIT;
  slc_send_params_t sp = SLC_SEND_PARAMS_INIT;
  slc_method_stats_t ms = SLC_METHOD_STATS_INIT;
  slc_pool_stats_t ps = SLC_POOL_STATS_INIT;
  slc_pool_class_stats_t cs = SLC_POOL_CLASS_STATS_INIT;
  const char* name = NULL;
  size_t size = 0;
  uint32_t id = 0;
  uint64_t value = 0;
  int32_t port = 0;
  lp.field_mask = UINT64_C(1) << 5;
  expect("listen mask bit 5", slc_engine_listen(eng, "127.0.0.1:0", 11, &lp, &port), SLC_ERR_INVALID);
  expect("listen NULL port", slc_engine_listen(eng, "127.0.0.1:0", 11, NULL, NULL), SLC_ERR_INVALID);
  expect("cancel NULL request", slc_engine_cancel(eng, NULL), SLC_ERR_INVALID);
  expect("slot above the largest class", slc_engine_try_get_send_slot(eng, (size_t)1 << 40, &mem), SLC_ERR_INVALID);
  expect("no slot handed out", mem == NULL ? SLC_OK : SLC_ERR_INVALID, SLC_OK);
  expect("a 64-byte slot", slc_engine_try_get_send_slot(eng, 64, &mem), SLC_OK);
  expect("its capacity", slc_mem_data(mem, &size) != NULL && size >= 64 ? SLC_OK : SLC_ERR_INVALID, SLC_OK);
  expect("send_mem beyond the slot", slc_send_mem(self, 1, mem, size + 1, NULL), SLC_ERR_INVALID);
  sp.field_mask = SLC_SEND_PARAM_FLAGS;
  sp.flags = SLC_SEND_FLAG_COPY;
  expect("send_mem with COPY", slc_send_mem(self, 1, mem, 8, &sp), SLC_ERR_INVALID);
  sp.field_mask = UINT64_C(1) << 9;
  expect("send_mem mask bit 9", slc_send_mem(self, 1, mem, 8, &sp), SLC_ERR_INVALID);
  slc_mem_release(mem);
  expect("stat_by_id far past the end", slc_engine_stat_by_id(eng, UINT32_MAX, &value), SLC_ERR_NOT_FOUND);
  expect("stat_name far past the end", slc_engine_stat_name(eng, UINT32_MAX, &name, &size), SLC_ERR_NOT_FOUND);
  expect("stat_id unknown", slc_engine_stat_id(eng, "am.no_such", 10, &id), SLC_ERR_NOT_FOUND);
  expect("stat_id NULL name, length 3", slc_engine_stat_id(eng, NULL, 3, &id), SLC_ERR_INVALID);
  ms.field_mask = SLC_METHOD_STATS_FIELD_COUNTS;
  expect("method above SLC_MAX_HANDLERS", slc_engine_method_stats(eng, SLC_MAX_HANDLERS + 1, 0, &ms), SLC_ERR_INVALID);
  expect("a method never called", slc_engine_method_stats(eng, 77, 0, &ms), SLC_ERR_NOT_FOUND);
  ms.field_mask = UINT64_C(1) << 6;
  expect("method stats mask bit 6", slc_engine_method_stats(eng, 5, 0, &ms), SLC_ERR_INVALID);
  ps.field_mask = SLC_POOL_STATS_FIELD_BYTES;
  expect("pool direction 2", slc_engine_pool_stats(eng, 2, &ps), SLC_ERR_INVALID);
  ps.field_mask = UINT64_C(1) << 7;
  expect("pool stats mask bit 7", slc_engine_pool_stats(eng, SLC_POOL_SEND, &ps), SLC_ERR_INVALID);
  cs.field_mask = SLC_POOL_CLASS_FIELD_NAME;
  expect("class index 1000", slc_engine_pool_class_stats(eng, SLC_POOL_RECV, 1000, &cs), SLC_ERR_NOT_FOUND);
  expect("class direction -1", slc_engine_pool_class_stats(eng, -1, 0, &cs), SLC_ERR_INVALID);
  cs.field_mask = UINT64_C(1) << 3;
  expect("class stats mask bit 3", slc_engine_pool_class_stats(eng, SLC_POOL_SEND, 0, &cs), SLC_ERR_INVALID);
}

/* Another thread: posts work to the engine, and its own failure's detail stays its own; the
 * statistics, which belong to the engine thread, are refused to it. */
struct poster {
  slc_engine_t* eng;
  int32_t posted;
  volatile int ran;
  char detail[160];
  int32_t stat, pool;
};

static void work(void* user_data) { ((struct poster*)user_data)->ran = 1; }

static void* post_from_thread(void* arg) {
  struct poster* p = arg;
  p->posted = slc_engine_post(p->eng, work, p);
  slc_send(NULL, 1, NULL, 0, NULL);
  snprintf(p->detail, sizeof p->detail, "%s", slc_last_error());
  {
    uint64_t value = 0;
    slc_pool_stats_t ps = SLC_POOL_STATS_INIT;
    ps.field_mask = SLC_POOL_STATS_FIELD_BYTES;
    p->stat = slc_engine_stat_by_id(p->eng, 0, &value);
    p->pool = slc_engine_pool_stats(p->eng, SLC_POOL_SEND, &ps);
  }
  return NULL;
}

static int32_t work_ran(void* user_data) { return ((struct poster*)user_data)->ran; }

static void posts(slc_engine_t* eng) {
  struct poster p = {eng, SLC_ERR_UNKNOWN, 0, "", SLC_OK, SLC_OK};
  pthread_t t;
  expect("a failure on this thread", slc_engine_stat(eng, "am.no_such", 10, NULL), SLC_ERR_INVALID);
  if (pthread_create(&t, NULL, post_from_thread, &p) != 0) {
    expect("pthread_create", SLC_ERR_INTERNAL, SLC_OK);
    return;
  }
  pthread_join(t, NULL);
  expect("post from another thread", p.posted, SLC_OK);
  expect("posted work ran", slc_engine_run_until(eng, work_ran, &p, INT64_C(10000000000)), SLC_OK);
  same("the other thread's detail is its own", strstr(p.detail, "slc_send") != NULL, 1);
  same("this thread's detail is its own", strstr(slc_last_error(), "slc_engine_stat") != NULL, 1);
  expect("post without fn", slc_engine_post(eng, NULL, NULL), SLC_ERR_INVALID);
  same("stat_by_id from another thread is refused", p.stat, SLC_ERR_INVALID);
  same("pool_stats from another thread is refused", p.pool, SLC_ERR_INVALID);
}

int main(void) {
  slc_context_t* ctx = NULL;
  slc_engine_t* eng = NULL;
  slc_peer_t* self = NULL;
  slc_engine_params_t ep = SLC_ENGINE_PARAMS_INIT;
  nulls();
  expect("init", slc_init(), SLC_OK);
  bad_params();
  expect("context", slc_context_create(NULL, &ctx), SLC_OK);
  ep.field_mask = SLC_ENGINE_PARAM_NUMA_NODE;
  ep.numa_node = -3;
  expect("negative NUMA node", slc_engine_create(ctx, &ep, &eng), SLC_ERR_INVALID);
  expect("engine", slc_engine_create(ctx, NULL, &eng), SLC_OK);
  expect("peer 1 of a one-rank job", slc_engine_peer(eng, 1, &self), SLC_ERR_INVALID);
  expect("peer 0", slc_engine_peer(eng, 0, &self), SLC_OK);
  if (eng != NULL && self != NULL) sends(eng, self);
  if (eng != NULL && self != NULL) new_calls(eng, self);
  if (eng != NULL) posts(eng);
  slc_engine_destroy(eng);
  slc_context_destroy(ctx);
  if (failures == 0) printf("misuse: every call refused or answered as documented\n");
  return failures == 0 ? 0 : 1;
}
