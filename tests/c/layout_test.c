/* The C API's ABI, pinned: every public struct's size and field offsets (LP64), the status
 * codes' values and the flag bits, for C API major 1. A change here breaks programs built
 * against an older header: it needs a new major version (docs/c-api.md), not an edit of this
 * test. (Major 0 was the unreleased development API; 1.0 changed slc_call, slc_engine_cancel
 * and slc_engine_listen, and added the structs from slc_listen_params_t on.) */
#include <stddef.h>
#include <stdio.h>

#include <sluice/sluice_c.h>

static int failures;

static void pin(const char* what, size_t got, size_t want) {
  if (got == want) return;
  fprintf(stderr, "layout: %s is %zu, pinned at %zu\n", what, got, want);
  ++failures;
}

#define PIN_OFFSET(type, field, want) pin(#type "." #field, offsetof(type, field), want)
#define PIN_VALUE(name, want) pin(#name, (size_t)(long long)(name), (size_t)(long long)(want))

int main(void) {
  if (sizeof(void*) != 8) {
    printf("layout: pinned for LP64 only; skipped\n");
    return 77;
  }
  pin("sizeof(slc_context_params_t)", sizeof(slc_context_params_t), 24);
  PIN_OFFSET(slc_context_params_t, field_mask, 0);
  PIN_OFFSET(slc_context_params_t, config, 8);
  PIN_OFFSET(slc_context_params_t, config_length, 16);

  pin("sizeof(slc_engine_params_t)", sizeof(slc_engine_params_t), 16);
  PIN_OFFSET(slc_engine_params_t, field_mask, 0);
  PIN_OFFSET(slc_engine_params_t, numa_node, 8);

  pin("sizeof(slc_handler_params_t)", sizeof(slc_handler_params_t), 32);
  PIN_OFFSET(slc_handler_params_t, field_mask, 0);
  PIN_OFFSET(slc_handler_params_t, sink, 8);
  PIN_OFFSET(slc_handler_params_t, sink_release, 16);
  PIN_OFFSET(slc_handler_params_t, unordered, 24);

  pin("sizeof(slc_send_params_t)", sizeof(slc_send_params_t), 48);
  PIN_OFFSET(slc_send_params_t, field_mask, 0);
  PIN_OFFSET(slc_send_params_t, header, 8);
  PIN_OFFSET(slc_send_params_t, header_size, 16);
  PIN_OFFSET(slc_send_params_t, callback, 24);
  PIN_OFFSET(slc_send_params_t, user_data, 32);
  PIN_OFFSET(slc_send_params_t, flags, 40);

  pin("sizeof(slc_call_params_t)", sizeof(slc_call_params_t), 56);
  PIN_OFFSET(slc_call_params_t, field_mask, 0);
  PIN_OFFSET(slc_call_params_t, header, 8);
  PIN_OFFSET(slc_call_params_t, header_size, 16);
  PIN_OFFSET(slc_call_params_t, timeout_ns, 24);
  PIN_OFFSET(slc_call_params_t, reply_buffer, 32);
  PIN_OFFSET(slc_call_params_t, reply_buffer_size, 40);
  PIN_OFFSET(slc_call_params_t, flags, 48);

  pin("sizeof(slc_listen_params_t)", sizeof(slc_listen_params_t), 16);
  PIN_OFFSET(slc_listen_params_t, field_mask, 0);
  PIN_OFFSET(slc_listen_params_t, share_port, 8);

  pin("sizeof(slc_method_stats_t)", sizeof(slc_method_stats_t), 64);
  PIN_OFFSET(slc_method_stats_t, field_mask, 0);
  PIN_OFFSET(slc_method_stats_t, calls, 8);
  PIN_OFFSET(slc_method_stats_t, errors, 16);
  PIN_OFFSET(slc_method_stats_t, timed, 24);
  PIN_OFFSET(slc_method_stats_t, p50_ns, 32);
  PIN_OFFSET(slc_method_stats_t, p90_ns, 40);
  PIN_OFFSET(slc_method_stats_t, p99_ns, 48);
  PIN_OFFSET(slc_method_stats_t, max_ns, 56);

  pin("sizeof(slc_pool_stats_t)", sizeof(slc_pool_stats_t), 40);
  PIN_OFFSET(slc_pool_stats_t, field_mask, 0);
  PIN_OFFSET(slc_pool_stats_t, budget_bytes, 8);
  PIN_OFFSET(slc_pool_stats_t, mapped_bytes, 16);
  PIN_OFFSET(slc_pool_stats_t, high_water_bytes, 24);
  PIN_OFFSET(slc_pool_stats_t, classes, 32);

  pin("sizeof(slc_pool_class_stats_t)", sizeof(slc_pool_class_stats_t), 112);
  PIN_OFFSET(slc_pool_class_stats_t, field_mask, 0);
  PIN_OFFSET(slc_pool_class_stats_t, name, 8);
  pin("sizeof(slc_pool_class_stats_t.name)", sizeof(((slc_pool_class_stats_t*)0)->name), 32);
  PIN_OFFSET(slc_pool_class_stats_t, slot_size, 40);
  PIN_OFFSET(slc_pool_class_stats_t, slots_total, 48);
  PIN_OFFSET(slc_pool_class_stats_t, slots_free, 56);
  PIN_OFFSET(slc_pool_class_stats_t, slots_max, 64);
  PIN_OFFSET(slc_pool_class_stats_t, reserved, 72);
  PIN_OFFSET(slc_pool_class_stats_t, high_water, 80);
  PIN_OFFSET(slc_pool_class_stats_t, growth_events, 88);
  PIN_OFFSET(slc_pool_class_stats_t, exhaustion_events, 96);
  PIN_OFFSET(slc_pool_class_stats_t, cross_thread_returns, 104);

  PIN_VALUE(SLC_API_VERSION_MAJOR, 1);
  PIN_VALUE(SLC_OK, 0);
  PIN_VALUE(SLC_IN_PROGRESS, 1);
  PIN_VALUE(SLC_ERR_WOULD_BLOCK, -1);
  PIN_VALUE(SLC_ERR_INVALID, -2);
  PIN_VALUE(SLC_ERR_UNAVAILABLE, -3);
  PIN_VALUE(SLC_ERR_DEADLINE, -4);
  PIN_VALUE(SLC_ERR_CANCELLED, -5);
  PIN_VALUE(SLC_ERR_REFUSED, -6);
  PIN_VALUE(SLC_ERR_UNIMPLEMENTED, -7);
  PIN_VALUE(SLC_ERR_INTERNAL, -8);
  PIN_VALUE(SLC_ERR_OUT_OF_RANGE, -9);
  PIN_VALUE(SLC_ERR_PERMISSION, -10);
  PIN_VALUE(SLC_ERR_PRECONDITION, -11);
  PIN_VALUE(SLC_ERR_DATA_LOSS, -12);
  PIN_VALUE(SLC_ERR_NO_MEMORY, -13);
  PIN_VALUE(SLC_ERR_VERSION, -14);
  PIN_VALUE(SLC_ERR_NOT_FOUND, -15);
  PIN_VALUE(SLC_ERR_ALREADY_EXISTS, -16);
  PIN_VALUE(SLC_ERR_NOT_INITIALIZED, -17);
  PIN_VALUE(SLC_ERR_UNKNOWN, -18);
  PIN_VALUE(SLC_TIMEOUT_INFINITE, -1);
  PIN_VALUE(SLC_MAX_HEADER, 1024);
  PIN_VALUE(SLC_MAX_HANDLERS, 1024);
  PIN_VALUE(SLC_CONTEXT_PARAM_CONFIG, 1);
  PIN_VALUE(SLC_ENGINE_PARAM_NUMA_NODE, 1);
  PIN_VALUE(SLC_HANDLER_PARAM_SINK, 1);
  PIN_VALUE(SLC_HANDLER_PARAM_SINK_RELEASE, 2);
  PIN_VALUE(SLC_HANDLER_PARAM_UNORDERED, 4);
  PIN_VALUE(SLC_SEND_PARAM_HEADER, 1);
  PIN_VALUE(SLC_SEND_PARAM_CALLBACK, 2);
  PIN_VALUE(SLC_SEND_PARAM_FLAGS, 4);
  PIN_VALUE(SLC_SEND_FLAG_COPY, 1);
  PIN_VALUE(SLC_SEND_FLAG_IMMEDIATE, 2);
  PIN_VALUE(SLC_CALL_PARAM_HEADER, 1);
  PIN_VALUE(SLC_CALL_PARAM_TIMEOUT, 2);
  PIN_VALUE(SLC_CALL_PARAM_REPLY_BUFFER, 4);
  PIN_VALUE(SLC_CALL_PARAM_FLAGS, 8);
  PIN_VALUE(SLC_LISTEN_PARAM_SHARE_PORT, 1);
  PIN_VALUE(SLC_METHOD_STATS_FIELD_COUNTS, 1);
  PIN_VALUE(SLC_METHOD_STATS_FIELD_LATENCY, 2);
  PIN_VALUE(SLC_POOL_SEND, 0);
  PIN_VALUE(SLC_POOL_RECV, 1);
  PIN_VALUE(SLC_POOL_STATS_FIELD_BYTES, 1);
  PIN_VALUE(SLC_POOL_STATS_FIELD_CLASSES, 2);
  PIN_VALUE(SLC_POOL_CLASS_FIELD_NAME, 1);
  PIN_VALUE(SLC_POOL_CLASS_FIELD_SLOTS, 2);
  PIN_VALUE(SLC_POOL_CLASS_FIELD_EVENTS, 4);
  if (failures == 0) printf("layout: 9 structs and every constant as pinned\n");
  return failures == 0 ? 0 : 1;
}
