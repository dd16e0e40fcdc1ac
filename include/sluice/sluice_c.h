/* sluice/sluice_c.h — Sluice's C API (C99; also valid C++), for C, Fortran and FFI users.
 *
 * Model: the C++ API (engine.h) seen through opaque handles. A context (slc_context_t) per
 * process; engines (slc_engine_t) made from it, each driven by one thread; peers
 * (slc_peer_t) owned by their engine, valid for its life; messages (slc_msg_t) handed to
 * handlers and reply callbacks, valid until the callback returns unless kept
 * (slc_msg_keep); calls (slc_request_t, a token naming one call: nothing to free);
 * registered send-pool slots (slc_mem_t, the caller's until slc_mem_release). Threads follow
 * engine.h: the thread that first drives an engine (progress, run_until, wait) is its only
 * caller from then on; slc_engine_post(), slc_engine_rank/size(), slc_engine_peer() and
 * slc_engine_destroy() are the exceptions.
 *
 * Statuses: every call that can fail returns an int32_t: SLC_OK (0), SLC_IN_PROGRESS (1) or
 * one of the negative SLC_ERR_* codes, whose values never change. slc_strerror() names a
 * code; slc_last_error() is this thread's detail of the last failure (the C++ status text).
 * No C++ exception leaves the library: one is caught and returned as SLC_ERR_INTERNAL or
 * SLC_ERR_NO_MEMORY.
 *
 * Parameter structs begin with a uint64_t field_mask saying which fields the caller set;
 * they only ever grow at the end, and a bit this library does not know is refused
 * (SLC_ERR_INVALID), so a newer program never runs with its settings silently ignored.
 * Initialize them with their SLC_*_PARAMS_INIT macro; a NULL params pointer means defaults.
 * Output structs (statistics) begin with one too: the caller sets the groups of fields it
 * wants filled (their SLC_*_INIT macros are the zero value).
 * Strings are pointer + length; booleans are int32_t; times are int64_t nanoseconds, with
 * SLC_TIMEOUT_INFINITE (-1) for none.
 *
 * Inside a handler, a send or reply callback, a run_until predicate or posted work (all run
 * on the engine thread, inside progress), a program may call: the slc_msg_* accessors,
 * slc_msg_keep/release/reply/reply_error/reply_mem, slc_send, slc_send_mem, slc_call,
 * slc_engine_cancel, slc_engine_try_get_send_slot, slc_mem_data/release, the statistics
 * calls, slc_engine_post, slc_engine_peer and the slc_peer_* queries. It must not
 * call slc_engine_progress, run_until, wait, barrier, connect, destroy, register or
 * unregister (SLC_ERR_INVALID; destroy is undefined). docs/c-api.md has the ABI promise.
 */
#ifndef SLUICE_SLUICE_C_H
#define SLUICE_SLUICE_C_H

#include <stddef.h>
#include <stdint.h>

/* C names (slc_*, SLC_*), not the C++ house names: clang-tidy's naming check is off here. */
/* NOLINTBEGIN(readability-identifier-naming) */
#ifdef __cplusplus
extern "C" {
#endif

/* Marks the library's exported entry points (it is built with hidden visibility). */
#if defined(__GNUC__) || defined(__clang__)
#define SLC_API __attribute__((visibility("default")))
#else
#define SLC_API
#endif

/* The C API version these declarations describe (not the library's release). */
#define SLC_API_VERSION_MAJOR 1
#define SLC_API_VERSION_MINOR 0

#define SLC_TIMEOUT_INFINITE (-1)
/* Largest user header of a message, and number of handler ids (0 .. SLC_MAX_HANDLERS-1). */
#define SLC_MAX_HEADER 1024
#define SLC_MAX_HANDLERS 1024

/* Status codes. Their values are stable forever; new codes only get new numbers. */
enum {
  SLC_OK = 0,
  SLC_IN_PROGRESS = 1,           /* accepted; its completion reports the outcome */
  SLC_ERR_WOULD_BLOCK = -1,      /* no credit / queue room now: progress, then retry */
  SLC_ERR_INVALID = -2,          /* bad argument, state or thread; nothing was done */
  SLC_ERR_UNAVAILABLE = -3,      /* the peer failed, closed or cannot be reached */
  SLC_ERR_DEADLINE = -4,         /* a deadline passed */
  SLC_ERR_CANCELLED = -5,        /* cancelled, or the engine closed first */
  SLC_ERR_REFUSED = -6,          /* refused: beyond the server's RPC window, no credits */
  SLC_ERR_UNIMPLEMENTED = -7,    /* no such handler or method */
  SLC_ERR_INTERNAL = -8,         /* a remote handler failed; a bug */
  SLC_ERR_OUT_OF_RANGE = -9,     /* a reply larger than the reply buffer */
  SLC_ERR_PERMISSION = -10,      /* authentication failed */
  SLC_ERR_PRECONDITION = -11,    /* wrong state: already listening, ... */
  SLC_ERR_DATA_LOSS = -12,       /* corrupt wire data */
  SLC_ERR_NO_MEMORY = -13,       /* out of memory */
  SLC_ERR_VERSION = -14,         /* the library is older than the header (slc_init) */
  SLC_ERR_NOT_FOUND = -15,       /* no such handler, counter, ... */
  SLC_ERR_ALREADY_EXISTS = -16,  /* a handler is registered already */
  SLC_ERR_NOT_INITIALIZED = -17, /* slc_init() was not called */
  SLC_ERR_UNKNOWN = -18          /* a status this version cannot name */
};

typedef struct slc_context slc_context_t;
typedef struct slc_engine slc_engine_t;
typedef struct slc_peer slc_peer_t;
typedef struct slc_msg slc_msg_t;
typedef struct slc_request slc_request_t;
typedef struct slc_mem slc_mem_t;

/* ---- version and errors ---- */

/* Checks that this library implements C API major.minor (same major, minor at least the
 * caller's) and enables slc_context_create. SLC_OK; SLC_ERR_VERSION otherwise. Bindings
 * (Fortran, Python) call it with the version they were written for. Any thread, any time. */
SLC_API int32_t slc_init_version(uint32_t major, uint32_t minor);
/* slc_init_version() with this header's version: the one header-only helper, because only
 * the caller's compilation knows which header it saw. */
static inline int32_t slc_init(void) { return slc_init_version(SLC_API_VERSION_MAJOR, SLC_API_VERSION_MINOR); }
/* The library's C API version and its release (e.g. 0.1.0). Any pointer may be NULL. */
SLC_API void slc_get_version(uint32_t* api_major, uint32_t* api_minor, uint32_t* release_major, uint32_t* release_minor,
                             uint32_t* release_patch);
/* A static name for `status` ("SLC_ERR_WOULD_BLOCK: no room now, progress and retry"). */
SLC_API const char* slc_strerror(int32_t status);
/* This thread's detail of the last failed call ("" when none): the C++ status message. Valid
 * until the thread's next failing call. */
SLC_API const char* slc_last_error(void);

/* ---- contexts ---- */

#define SLC_CONTEXT_PARAM_CONFIG (UINT64_C(1) << 0)
typedef struct slc_context_params {
  uint64_t field_mask;
  /* SLC_CONTEXT_PARAM_CONFIG: "NAME=VALUE" lines (SLUICE_CREDITS=64\nSLUICE_TLS=shm) that
   * override the environment's SLUICE_* for this context. */
  const char* config;
  size_t config_length;
} slc_context_params_t;
#define SLC_CONTEXT_PARAMS_INIT \
  { 0, NULL, 0 }

/* Creates the process's context: reads SLUICE_* and bootstraps the job (rank mode under
 * sluice-run/mpirun; alone otherwise). SLC_OK and *out; SLC_ERR_NOT_INITIALIZED,
 * SLC_ERR_INVALID (a bad SLUICE_* value or config line, named), SLC_ERR_UNAVAILABLE (UCX or
 * the bootstrap cannot start). */
SLC_API int32_t slc_context_create(const slc_context_params_t* params, slc_context_t** out);
/* Destroys the handle; engines made from it keep what they use alive. NULL is ignored. */
SLC_API void slc_context_destroy(slc_context_t* context);
/* This process's rank and the job's size; -1 for a NULL context. */
SLC_API int32_t slc_context_rank(const slc_context_t* context);
SLC_API int32_t slc_context_size(const slc_context_t* context);

/* ---- engines ---- */

#define SLC_ENGINE_PARAM_NUMA_NODE (UINT64_C(1) << 0)
typedef struct slc_engine_params {
  uint64_t field_mask;
  int32_t numa_node; /* SLC_ENGINE_PARAM_NUMA_NODE: the pools' NUMA node (SLUICE_NUMA) */
} slc_engine_params_t;
#define SLC_ENGINE_PARAMS_INIT \
  { 0, 0 }

/* Creates an engine driven by the calling thread. Collective in rank mode: every rank
 * creates its engines in the same order. SLC_OK; SLC_ERR_INVALID, SLC_ERR_UNAVAILABLE. */
SLC_API int32_t slc_engine_create(slc_context_t* context, const slc_engine_params_t* params, slc_engine_t** out);
/* Orderly close (engine.h ~Engine): queued sends go out, completions run with their
 * outcome (perhaps SLC_ERR_CANCELLED). Not from inside a callback. NULL is ignored. */
SLC_API void slc_engine_destroy(slc_engine_t* engine);
/* Rank and size as the context's; -1 for NULL. */
SLC_API int32_t slc_engine_rank(const slc_engine_t* engine);
SLC_API int32_t slc_engine_size(const slc_engine_t* engine);
/* Largest user header + payload that travels eagerly (copied at once); 0 for NULL. */
SLC_API size_t slc_engine_eager_limit(const slc_engine_t* engine);

/* Rank mode: the peer engine in process `rank`. SLC_OK; SLC_ERR_INVALID for no such rank. */
SLC_API int32_t slc_engine_peer(slc_engine_t* engine, int32_t rank, slc_peer_t** out);
#define SLC_LISTEN_PARAM_SHARE_PORT (UINT64_C(1) << 0)
typedef struct slc_listen_params {
  uint64_t field_mask;
  /* SLC_LISTEN_PARAM_SHARE_PORT, nonzero: SO_REUSEPORT. Engines that listen on one host:port
   * with it (in this process or others of the same user) share its connections, the kernel
   * giving each new one to one of them (engine.h ListenOptions). */
  int32_t share_port;
} slc_listen_params_t;
#define SLC_LISTEN_PARAMS_INIT \
  { 0, 0 }

/* Client/server: listens on host:port ("127.0.0.1:0"; port 0 picks one) and stores the port;
 * params NULL: a port of its own. SLC_ERR_INVALID (bad address, unknown mask bits),
 * SLC_ERR_PRECONDITION (listening already), SLC_ERR_UNAVAILABLE (cannot bind: the port is
 * taken, unless this listener and every one on it share it). */
SLC_API int32_t slc_engine_listen(slc_engine_t* engine, const char* host_port, size_t length,
                                  const slc_listen_params_t* params, int32_t* port);
/* Connects to a listening engine, progressing this one meanwhile, within timeout_ns
 * (SLC_TIMEOUT_INFINITE: none; 0: SLUICE_CONNECT_TIMEOUT). SLC_ERR_UNAVAILABLE,
 * SLC_ERR_PERMISSION, SLC_ERR_DEADLINE, SLC_ERR_INVALID. */
SLC_API int32_t slc_engine_connect(slc_engine_t* engine, const char* host_port, size_t length, int64_t timeout_ns,
                                   slc_peer_t** out);

/* A peer's rank (-1 for a client/server peer or NULL), its index (the source() of its
 * messages; UINT32_MAX for NULL), and whether it is alive (1/0). Engine thread. */
SLC_API int32_t slc_peer_rank(const slc_peer_t* peer);
SLC_API uint32_t slc_peer_id(const slc_peer_t* peer);
SLC_API int32_t slc_peer_alive(const slc_peer_t* peer);

/* ---- handlers and messages ---- */

/* Runs on the engine thread for each message to its id. `msg` is valid until it returns
 * (slc_msg_keep to hold it longer). */
typedef void (*slc_handler_fn)(slc_msg_t* msg, void* user_data);
/* Chooses where a rendezvous payload of `size` bytes lands: a buffer of at least `size`
 * bytes valid until the handler runs, or NULL for a receive-pool slot. */
typedef void* (*slc_sink_fn)(const slc_msg_t* announcement, size_t size, void* user_data);
/* Gives back a sink buffer whose payload will not reach the handler (engine.h SinkRelease). */
typedef void (*slc_sink_release_fn)(const slc_msg_t* announcement, void* buffer, size_t size, void* user_data);

#define SLC_HANDLER_PARAM_SINK (UINT64_C(1) << 0)
#define SLC_HANDLER_PARAM_SINK_RELEASE (UINT64_C(1) << 1)
#define SLC_HANDLER_PARAM_UNORDERED (UINT64_C(1) << 2)
typedef struct slc_handler_params {
  uint64_t field_mask;
  slc_sink_fn sink;
  slc_sink_release_fn sink_release;
  int32_t unordered; /* deliver without waiting for earlier rendezvous payloads */
} slc_handler_params_t;
#define SLC_HANDLER_PARAMS_INIT \
  { 0, NULL, NULL, 0 }

/* Installs `fn` for `id`; `user_data` is passed to fn, sink and sink_release, and must stay
 * valid until unregistered or the engine is destroyed. SLC_OK; SLC_ERR_ALREADY_EXISTS;
 * SLC_ERR_INVALID (id >= SLC_MAX_HANDLERS, NULL fn, wrong thread, inside a callback). */
SLC_API int32_t slc_engine_register(slc_engine_t* engine, uint16_t id, slc_handler_fn fn, void* user_data,
                                    const slc_handler_params_t* params);
/* SLC_OK; SLC_ERR_NOT_FOUND; SLC_ERR_INVALID. */
SLC_API int32_t slc_engine_unregister(slc_engine_t* engine, uint16_t id);

/* The sender (rank, or client peer id), handler id, whether it is a request (1/0), and views
 * of its header and payload (valid while the message is; no alignment promised: read values
 * with memcpy). -1/0/NULL for NULL or released. */
SLC_API int32_t slc_msg_source(const slc_msg_t* msg);
SLC_API uint16_t slc_msg_handler(const slc_msg_t* msg);
SLC_API int32_t slc_msg_is_request(const slc_msg_t* msg);
SLC_API const void* slc_msg_header(const slc_msg_t* msg, size_t* size);
SLC_API void* slc_msg_payload(const slc_msg_t* msg, size_t* size);
/* Takes a message over past its callback: *kept holds it (receive memory and the sender's
 * credit) until slc_msg_release(*kept). `msg` is empty afterwards. SLC_OK; SLC_ERR_INVALID;
 * SLC_ERR_NO_MEMORY. */
SLC_API int32_t slc_msg_keep(slc_msg_t* msg, slc_msg_t** kept);
/* Releases a message now (its memory and credit return); frees a kept one's handle. A
 * callback's own message is only emptied. NULL is ignored. Engine thread. */
SLC_API void slc_msg_release(slc_msg_t* msg);

/* ---- sends, calls and replies ---- */

/* Completion of a send or zero-copy reply: SLC_OK or why it was lost. Runs once, on the
 * engine thread, from progress, never inside the call that started it. */
typedef void (*slc_send_cb_fn)(int32_t status, void* user_data);

#define SLC_SEND_FLAG_COPY (UINT32_C(1) << 0)      /* copy the payload: free on return */
#define SLC_SEND_FLAG_IMMEDIATE (UINT32_C(1) << 1) /* SLC_ERR_WOULD_BLOCK rather than queue */

#define SLC_SEND_PARAM_HEADER (UINT64_C(1) << 0)
#define SLC_SEND_PARAM_CALLBACK (UINT64_C(1) << 1)
#define SLC_SEND_PARAM_FLAGS (UINT64_C(1) << 2)
typedef struct slc_send_params {
  uint64_t field_mask;
  const void* header; /* SLC_SEND_PARAM_HEADER: copied at once, at most SLC_MAX_HEADER */
  size_t header_size;
  slc_send_cb_fn callback; /* SLC_SEND_PARAM_CALLBACK, with user_data */
  void* user_data;
  uint32_t flags; /* SLC_SEND_PARAM_FLAGS: SLC_SEND_FLAG_* */
} slc_send_params_t;
#define SLC_SEND_PARAMS_INIT \
  { 0, NULL, 0, NULL, NULL, 0 }

/* Sends an active message to `handler` on `peer` (engine.h Peer::send). Zero copy: a
 * payload above the eager limit must stay valid and unchanged until the callback runs;
 * SLC_SEND_FLAG_COPY copies it first. SLC_SEND_FLAG_IMMEDIATE: the message leaves now or not
 * at all: SLC_ERR_WOULD_BLOCK when it would wait for a credit or behind queued messages (the
 * first message to a new peer may still wait for the handshake). Returns SLC_OK (the
 * callback will run once), SLC_ERR_WOULD_BLOCK (progress, then retry; no callback),
 * SLC_ERR_INVALID, SLC_ERR_UNAVAILABLE. */
SLC_API int32_t slc_send(slc_peer_t* peer, uint16_t handler, const void* payload, size_t size,
                         const slc_send_params_t* params);

/* RPC completion: SLC_OK with the reply (valid until it returns; slc_msg_keep to hold it), or
 * an error (SLC_ERR_DEADLINE, SLC_ERR_CANCELLED, SLC_ERR_UNAVAILABLE, SLC_ERR_REFUSED,
 * SLC_ERR_UNIMPLEMENTED, SLC_ERR_OUT_OF_RANGE, the server's code...) with reply NULL and the
 * message in slc_last_error(). Runs once, on the engine thread. */
typedef void (*slc_reply_fn)(int32_t status, slc_msg_t* reply, void* user_data);

#define SLC_CALL_PARAM_HEADER (UINT64_C(1) << 0)
#define SLC_CALL_PARAM_TIMEOUT (UINT64_C(1) << 1)
#define SLC_CALL_PARAM_REPLY_BUFFER (UINT64_C(1) << 2)
#define SLC_CALL_PARAM_FLAGS (UINT64_C(1) << 3)
typedef struct slc_call_params {
  uint64_t field_mask;
  const void* header; /* SLC_CALL_PARAM_HEADER */
  size_t header_size;
  int64_t timeout_ns; /* SLC_CALL_PARAM_TIMEOUT; SLC_TIMEOUT_INFINITE by default */
  void* reply_buffer; /* SLC_CALL_PARAM_REPLY_BUFFER: the reply's payload lands here */
  size_t reply_buffer_size;
  uint32_t flags; /* SLC_CALL_PARAM_FLAGS: SLC_SEND_FLAG_COPY */
} slc_call_params_t;
#define SLC_CALL_PARAMS_INIT \
  { 0, NULL, 0, 0, NULL, 0, 0 }

/* Calls `method` on `peer` (engine.h Peer::call); `on_reply` runs once when SLC_OK is
 * returned. *request (may be NULL) receives the call's handle for slc_engine_cancel: a token
 * (no memory behind it, nothing to free, never NULL), usable even after the call completed
 * and never naming another call of the engine. Returns as slc_send, and SLC_ERR_INVALID for a
 * NULL on_reply. */
SLC_API int32_t slc_call(slc_peer_t* peer, uint16_t method, const void* payload, size_t size,
                         const slc_call_params_t* params, slc_reply_fn on_reply, void* user_data,
                         slc_request_t** request);
/* Cancels a call: it completes once with SLC_ERR_CANCELLED unless it completed already (then
 * nothing happens). SLC_OK; SLC_ERR_INVALID (NULL engine or request). */
SLC_API int32_t slc_engine_cancel(slc_engine_t* engine, slc_request_t* request);

/* Answers a request once (message.h). Without SLC_SEND_FLAG_COPY the payload is sent from
 * the caller's memory and must stay valid until params' callback runs; with it, it is
 * copied. SLC_OK; SLC_ERR_UNAVAILABLE (the caller is gone); SLC_ERR_INVALID (not a request,
 * answered already, sizes). */
SLC_API int32_t slc_msg_reply(slc_msg_t* request, const void* payload, size_t size, const slc_send_params_t* params);
/* Answers a request with an error: `status` (an SLC_ERR_* code) and a message reach the
 * caller's reply callback. */
SLC_API int32_t slc_msg_reply_error(slc_msg_t* request, int32_t status, const char* message, size_t length);

/* ---- registered send memory ---- */

/* A registered send-pool slot of at least `size` bytes, to build a message in place and send
 * it without a copy or a registration lookup (engine.h try_get_send_slot). Never blocks.
 * SLC_OK and *out, the caller's until slc_mem_release; SLC_ERR_WOULD_BLOCK when its size
 * class is full (progress, then retry); SLC_ERR_INVALID (NULL, a size above the largest class
 * of SLUICE_POOL_CLASSES, wrong thread). Engine thread. */
SLC_API int32_t slc_engine_try_get_send_slot(slc_engine_t* engine, size_t size, slc_mem_t** out);
/* The slot's memory and its capacity (*size, may be NULL). NULL and 0 for NULL, or for a slot
 * whose engine was destroyed. */
SLC_API void* slc_mem_data(const slc_mem_t* mem, size_t* size);
/* Gives the slot back to its pool (any thread; also after its engine was destroyed). Not
 * while a send or reply from it has not completed. NULL is ignored. */
SLC_API void slc_mem_release(slc_mem_t* mem);
/* slc_send() of the first `length` bytes of a slot: a payload above the eager limit goes by
 * rendezvous with the slot's registration. The slot must stay unreleased and unchanged until
 * the callback runs; the caller still owns it after (send it again, or release it). Flags:
 * SLC_SEND_FLAG_IMMEDIATE; SLC_SEND_FLAG_COPY is refused. Returns as slc_send, and
 * SLC_ERR_INVALID for a NULL slot or a length beyond it. */
SLC_API int32_t slc_send_mem(slc_peer_t* peer, uint16_t handler, const slc_mem_t* payload, size_t length,
                             const slc_send_params_t* params);
/* slc_msg_reply() from the first `length` bytes of a slot: the slot must stay unreleased and
 * unchanged until the callback runs, and is the caller's after. No flags (a reply never waits
 * for credits, message.h). Returns as slc_msg_reply, and SLC_ERR_INVALID for a NULL slot or
 * a length beyond it. */
SLC_API int32_t slc_msg_reply_mem(slc_msg_t* request, const slc_mem_t* payload, size_t length,
                                  const slc_send_params_t* params);

/* ---- progress ---- */

/* Progresses once, running due handlers and completions: 1 when anything happened, 0 when
 * not, SLC_ERR_INVALID (NULL, wrong thread). */
SLC_API int32_t slc_engine_progress(slc_engine_t* engine);
/* Returns nonzero when the wait is over; called on the engine thread between progress calls. */
typedef int32_t (*slc_predicate_fn)(void* user_data);
/* Progresses until done(user_data) is nonzero (SLC_OK) or timeout_ns passes
 * (SLC_ERR_DEADLINE); sleeps while idle as engine.h run_until does. */
SLC_API int32_t slc_engine_run_until(slc_engine_t* engine, slc_predicate_fn done, void* user_data, int64_t timeout_ns);
/* Sleeps until there is something to do or timeout_ns passes, then progresses. */
SLC_API int32_t slc_engine_wait(slc_engine_t* engine, int64_t timeout_ns);
/* Any thread: runs fn(user_data) on the engine thread from progress, and wakes the engine. */
typedef void (*slc_work_fn)(void* user_data);
SLC_API int32_t slc_engine_post(slc_engine_t* engine, slc_work_fn fn, void* user_data);
/* Rank mode: waits until every rank's engine entered this barrier (engine.h barrier).
 * SLC_OK; SLC_ERR_DEADLINE; SLC_ERR_UNAVAILABLE (a rank failed). */
SLC_API int32_t slc_engine_barrier(slc_engine_t* engine, int64_t timeout_ns);
/* Lets go of the driving thread: the next thread to drive the engine owns it. */
SLC_API int32_t slc_engine_release_thread(slc_engine_t* engine);

/* ---- statistics ----
 * Engine thread. From another, C++ logs the call and these answer SLC_ERR_INVALID, except
 * slc_engine_method_stats: SLC_ERR_NOT_FOUND, as for a method not called yet. */

/* The counter `name` ("am.msgs_sent"; docs/stats.md). SLC_OK; SLC_ERR_NOT_FOUND;
 * SLC_ERR_INVALID. */
SLC_API int32_t slc_engine_stat(slc_engine_t* engine, const char* name, size_t length, uint64_t* value);
/* A counter's id: its index in the engine's registry, the same for the engine's life (ids
 * run from 0 in the order counters were made; another engine may number them otherwise).
 * Look a name up once, read by id after: no string compare. SLC_OK; SLC_ERR_NOT_FOUND;
 * SLC_ERR_INVALID. */
SLC_API int32_t slc_engine_stat_id(slc_engine_t* engine, const char* name, size_t length, uint32_t* id);
/* The value of counter `id`. SLC_OK; SLC_ERR_NOT_FOUND (no such id); SLC_ERR_INVALID. */
SLC_API int32_t slc_engine_stat_by_id(slc_engine_t* engine, uint32_t id, uint64_t* value);
/* The name of counter `id` (not NUL-terminated; valid for the engine's life): ids 0, 1, ...
 * until SLC_ERR_NOT_FOUND list every counter. `length` may be NULL. SLC_ERR_INVALID. */
SLC_API int32_t slc_engine_stat_name(slc_engine_t* engine, uint32_t id, const char** name, size_t* length);

/* Output structs: the caller sets field_mask to the groups of fields it wants filled; the
 * library fills those and leaves the rest alone (a bit it does not know: SLC_ERR_INVALID). */

/* One RPC method's calls as one side saw them (stats.h MethodStats; docs/stats.md). */
#define SLC_METHOD_STATS_FIELD_COUNTS (UINT64_C(1) << 0)  /* calls, errors, timed */
#define SLC_METHOD_STATS_FIELD_LATENCY (UINT64_C(1) << 1) /* p50_ns .. max_ns */
typedef struct slc_method_stats {
  uint64_t field_mask;
  uint64_t calls;                         /* made (slc_call returned SLC_OK) or received */
  uint64_t errors;                        /* of those ended, with a status other than SLC_OK */
  uint64_t timed;                         /* of them, with their latency measured (the first, then one in 16) */
  int64_t p50_ns, p90_ns, p99_ns, max_ns; /* of the timed ones (upper bounds within 12.5%) */
} slc_method_stats_t;
#define SLC_METHOD_STATS_INIT \
  { 0, 0, 0, 0, 0, 0, 0, 0 }
/* `method`'s figures as server (server nonzero: requests this engine answered) or client
 * (calls it made); method SLC_MAX_HANDLERS stands for every id at or above it. SLC_OK;
 * SLC_ERR_NOT_FOUND (no such call yet); SLC_ERR_INVALID (NULL, method above
 * SLC_MAX_HANDLERS, unknown bits). */
SLC_API int32_t slc_engine_method_stats(slc_engine_t* engine, uint16_t method, int32_t server, slc_method_stats_t* out);

/* One pool of an engine (pool.h PoolStats; docs/memory.md): send or receive. */
#define SLC_POOL_SEND 0
#define SLC_POOL_RECV 1
#define SLC_POOL_STATS_FIELD_BYTES (UINT64_C(1) << 0)   /* budget, mapped, high_water */
#define SLC_POOL_STATS_FIELD_CLASSES (UINT64_C(1) << 1) /* classes */
typedef struct slc_pool_stats {
  uint64_t field_mask;
  uint64_t budget_bytes;     /* SLUICE_SEND_POOL_MAX or SLUICE_RECV_POOL_MAX */
  uint64_t mapped_bytes;     /* mapped and registered now */
  uint64_t high_water_bytes; /* most bytes held in slots at once */
  uint32_t classes;          /* size classes: slc_engine_pool_class_stats 0 .. classes-1 */
} slc_pool_stats_t;
#define SLC_POOL_STATS_INIT \
  { 0, 0, 0, 0, 0 }
/* SLC_OK; SLC_ERR_INVALID (NULL, a direction other than SLC_POOL_SEND/RECV, unknown bits). */
SLC_API int32_t slc_engine_pool_stats(slc_engine_t* engine, int32_t direction, slc_pool_stats_t* out);

/* One size class of a pool (pool.h PoolClassStats). */
#define SLC_POOL_CLASS_FIELD_NAME (UINT64_C(1) << 0)   /* name */
#define SLC_POOL_CLASS_FIELD_SLOTS (UINT64_C(1) << 1)  /* slot_size .. reserved */
#define SLC_POOL_CLASS_FIELD_EVENTS (UINT64_C(1) << 2) /* high_water .. cross_thread_returns */
typedef struct slc_pool_class_stats {
  uint64_t field_mask;
  char name[32];        /* "send.eager", "recv.1M", "recv.large": NUL-terminated */
  uint64_t slot_size;   /* 0 for recv.large, whose landings are sized to their payloads */
  uint64_t slots_total; /* mapped so far */
  uint64_t slots_free;
  uint64_t slots_max; /* what the budget allows this class alone */
  uint64_t reserved;  /* eager classes: receive slots reserved, send slots held for replies */
  uint64_t high_water;
  uint64_t growth_events;
  uint64_t exhaustion_events;
  uint64_t cross_thread_returns;
} slc_pool_class_stats_t;
#define SLC_POOL_CLASS_STATS_INIT \
  { 0, {0}, 0, 0, 0, 0, 0, 0, 0, 0, 0 }
/* Class `index` of a pool. SLC_OK; SLC_ERR_NOT_FOUND (index >= classes); SLC_ERR_INVALID. */
SLC_API int32_t slc_engine_pool_class_stats(slc_engine_t* engine, int32_t direction, uint32_t index,
                                            slc_pool_class_stats_t* out);

#ifdef __cplusplus
} /* extern "C" */
#endif
/* NOLINTEND(readability-identifier-naming) */

#endif /* SLUICE_SLUICE_C_H */
