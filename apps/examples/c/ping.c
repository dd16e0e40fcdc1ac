/* ping (C): two ranks bounce a message back and forth through the C API, speaking the same
 * protocol as ping.cpp, so either rank may be the C++ program.
 *
 *   build/apps/sluice-run -n 2 build/apps/examples/ping_c [ITERATIONS] [SIZE]
 */
#define _POSIX_C_SOURCE 199309L /* clock_gettime under -std=c99 */

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <sluice/sluice_c.h>

enum { kPing = 1 };

struct state {
  slc_peer_t* other;
  int me, iterations, received, due;
  int32_t failure;
  size_t size;
  char* buffer;
};

/* Sends one message; a send refused for lack of credit stays due and is retried by done(). */
static void send_one(struct state* s) {
  int32_t r = slc_send(s->other, kPing, s->buffer, s->size, NULL);
  s->due = r == SLC_ERR_WOULD_BLOCK;
  if (r != SLC_OK && !s->due) s->failure = r;
}

static void on_ping(slc_msg_t* msg, void* user_data) {
  struct state* s = user_data;
  size_t size = 0;
  slc_msg_payload(msg, &size);
  ++s->received;
  if (size != s->size) s->failure = SLC_ERR_DATA_LOSS;
  if (s->me == 1 || s->received < s->iterations) send_one(s);
}

static int32_t done(void* user_data) {
  struct state* s = user_data;
  if (s->due) send_one(s);
  return (s->received == s->iterations && !s->due) || s->failure != SLC_OK || !slc_peer_alive(s->other);
}

static int fail(const char* what, int32_t status) {
  fprintf(stderr, "ping_c: %s: %s (%s)\n", what, slc_strerror(status), slc_last_error());
  return 1;
}

int main(int argc, char** argv) {
  struct state s = {NULL, 0, argc > 1 ? atoi(argv[1]) : 10000, 0, 0, SLC_OK, 8, NULL};
  slc_context_t* ctx = NULL;
  slc_engine_t* eng = NULL;
  struct timespec t0, t1;
  int32_t r;
  if (argc > 2) s.size = strtoul(argv[2], NULL, 10);
  if ((r = slc_init()) != SLC_OK) return fail("init", r);
  if ((r = slc_context_create(NULL, &ctx)) != SLC_OK) return fail("context", r);
  if (slc_context_size(ctx) != 2) {
    fprintf(stderr, "ping_c: run with two ranks (sluice-run -n 2 ...)\n");
    return 1;
  }
  if ((r = slc_engine_create(ctx, NULL, &eng)) != SLC_OK) return fail("engine", r);
  s.me = slc_engine_rank(eng);
  if ((r = slc_engine_peer(eng, 1 - s.me, &s.other)) != SLC_OK) return fail("peer", r);
  s.buffer = calloc(s.size > 0 ? s.size : 1, 1);
  if ((r = slc_engine_register(eng, kPing, on_ping, &s, NULL)) != SLC_OK) return fail("register", r);
  clock_gettime(CLOCK_MONOTONIC, &t0);
  if (s.me == 0) send_one(&s);
  /* No deadline: a peer that dies is declared so within SLUICE_PEER_TIMEOUT, ending the wait. */
  slc_engine_run_until(eng, done, &s, SLC_TIMEOUT_INFINITE);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (s.failure == SLC_OK && s.received != s.iterations) s.failure = SLC_ERR_UNAVAILABLE;
  if (s.failure != SLC_OK) return fail("ping", s.failure);
  if (s.me == 0) {
    double us = (t1.tv_sec - t0.tv_sec) * 1e6 + (t1.tv_nsec - t0.tv_nsec) / 1e3;
    printf("ping_c: %d round trips of %zu bytes, %.3f us one way\n", s.iterations, s.size, us / s.iterations / 2);
  }
  slc_engine_destroy(eng);
  slc_context_destroy(ctx);
  free(s.buffer);
  return 0;
}
