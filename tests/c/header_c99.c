/* sluice_c.h compiled as strict C99 (-std=c99 -pedantic -Wall -Wextra -Werror, meson.build):
 * a C compiler accepts it alone and twice, and its initializers fill every field. */
#include <sluice/sluice_c.h>

int header_c99_check(void);
int header_c99_check(void) {
  slc_context_params_t c = SLC_CONTEXT_PARAMS_INIT;
  slc_engine_params_t e = SLC_ENGINE_PARAMS_INIT;
  slc_handler_params_t h = SLC_HANDLER_PARAMS_INIT;
  slc_send_params_t s = SLC_SEND_PARAMS_INIT;
  slc_call_params_t k = SLC_CALL_PARAMS_INIT;
  slc_listen_params_t l = SLC_LISTEN_PARAMS_INIT;
  slc_method_stats_t m = SLC_METHOD_STATS_INIT;
  slc_pool_stats_t p = SLC_POOL_STATS_INIT;
  slc_pool_class_stats_t q = SLC_POOL_CLASS_STATS_INIT;
  return (int)(c.field_mask + e.field_mask + h.field_mask + s.field_mask + k.field_mask + l.field_mask + m.field_mask +
               p.field_mask + q.field_mask);
}
