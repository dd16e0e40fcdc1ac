! sluice.f90 — the Fortran 2008 module of Sluice's C API (<sluice/sluice_c.h>): BIND(C) interfaces,
! handle types wrapping C_PTR, parameter types with their zero values, and the status codes.
!
! Model and rules are sluice_c.h's (docs/c-api.md): a context per process, engines driven by one
! thread, handlers and callbacks as BIND(C) procedures passed with C_FUNLOC, user data as C_PTR.
! Handles are passed by value: a BIND(C) type holding one C_PTR is passed as the pointer itself
! (slc_request is a token naming a call, nothing to free; slc_mem a send slot, slc_mem_release it).
! Strings are character arrays with their length (len(s, kind=c_size_t)). Handler ids are
! integer(c_int16_t) (0 .. SLC_MAX_HANDLERS-1). Call slc_init_version(SLC_API_VERSION_MAJOR,
! SLC_API_VERSION_MINOR) first, as C's slc_init() does. Optional params arguments may be left out
! (NULL: defaults; pass the arguments after them by keyword). C's uint32_t is integer(c_int32_t).
! This module has interfaces only, no code: `use sluice` and link -lsluice.
module sluice
  use, intrinsic :: iso_c_binding
  implicit none

  integer(c_int32_t), parameter :: SLC_API_VERSION_MAJOR = 1, SLC_API_VERSION_MINOR = 0
  integer(c_int64_t), parameter :: SLC_TIMEOUT_INFINITE = -1
  integer(c_int32_t), parameter :: SLC_MAX_HEADER = 1024, SLC_MAX_HANDLERS = 1024

  ! Status codes (sluice_c.h; stable forever).
  integer(c_int32_t), parameter :: SLC_OK = 0, SLC_IN_PROGRESS = 1, SLC_ERR_WOULD_BLOCK = -1, &
    SLC_ERR_INVALID = -2, SLC_ERR_UNAVAILABLE = -3, SLC_ERR_DEADLINE = -4, SLC_ERR_CANCELLED = -5, &
    SLC_ERR_REFUSED = -6, SLC_ERR_UNIMPLEMENTED = -7, SLC_ERR_INTERNAL = -8, SLC_ERR_OUT_OF_RANGE = -9, &
    SLC_ERR_PERMISSION = -10, SLC_ERR_PRECONDITION = -11, SLC_ERR_DATA_LOSS = -12, SLC_ERR_NO_MEMORY = -13, &
    SLC_ERR_VERSION = -14, SLC_ERR_NOT_FOUND = -15, SLC_ERR_ALREADY_EXISTS = -16, &
    SLC_ERR_NOT_INITIALIZED = -17, SLC_ERR_UNKNOWN = -18

  integer(c_int64_t), parameter :: SLC_CONTEXT_PARAM_CONFIG = 1, SLC_ENGINE_PARAM_NUMA_NODE = 1
  integer(c_int64_t), parameter :: SLC_HANDLER_PARAM_SINK = 1, SLC_HANDLER_PARAM_SINK_RELEASE = 2, &
    SLC_HANDLER_PARAM_UNORDERED = 4
  integer(c_int64_t), parameter :: SLC_SEND_PARAM_HEADER = 1, SLC_SEND_PARAM_CALLBACK = 2, SLC_SEND_PARAM_FLAGS = 4
  integer(c_int32_t), parameter :: SLC_SEND_FLAG_COPY = 1, SLC_SEND_FLAG_IMMEDIATE = 2
  integer(c_int64_t), parameter :: SLC_CALL_PARAM_HEADER = 1, SLC_CALL_PARAM_TIMEOUT = 2, &
    SLC_CALL_PARAM_REPLY_BUFFER = 4, SLC_CALL_PARAM_FLAGS = 8
  integer(c_int64_t), parameter :: SLC_LISTEN_PARAM_SHARE_PORT = 1
  ! Output structs' field groups (the caller sets those it wants filled), and pool directions.
  integer(c_int64_t), parameter :: SLC_METHOD_STATS_FIELD_COUNTS = 1, SLC_METHOD_STATS_FIELD_LATENCY = 2
  integer(c_int64_t), parameter :: SLC_POOL_STATS_FIELD_BYTES = 1, SLC_POOL_STATS_FIELD_CLASSES = 2
  integer(c_int64_t), parameter :: SLC_POOL_CLASS_FIELD_NAME = 1, SLC_POOL_CLASS_FIELD_SLOTS = 2, &
    SLC_POOL_CLASS_FIELD_EVENTS = 4
  integer(c_int32_t), parameter :: SLC_POOL_SEND = 0, SLC_POOL_RECV = 1

  ! Handles.
  type, bind(c) :: slc_context
    type(c_ptr) :: ptr = c_null_ptr
  end type
  type, bind(c) :: slc_engine
    type(c_ptr) :: ptr = c_null_ptr
  end type
  type, bind(c) :: slc_peer
    type(c_ptr) :: ptr = c_null_ptr
  end type
  type, bind(c) :: slc_msg
    type(c_ptr) :: ptr = c_null_ptr
  end type
  type, bind(c) :: slc_request  ! a token naming one call: nothing to free
    type(c_ptr) :: ptr = c_null_ptr
  end type
  type, bind(c) :: slc_mem  ! a registered send-pool slot, the caller's until slc_mem_release
    type(c_ptr) :: ptr = c_null_ptr
  end type

  ! Parameter structs, their default initialization the zero value (SLC_*_PARAMS_INIT).
  type, bind(c) :: slc_context_params
    integer(c_int64_t) :: field_mask = 0
    type(c_ptr) :: config = c_null_ptr
    integer(c_size_t) :: config_length = 0
  end type
  type, bind(c) :: slc_engine_params
    integer(c_int64_t) :: field_mask = 0
    integer(c_int32_t) :: numa_node = 0
  end type
  type, bind(c) :: slc_handler_params
    integer(c_int64_t) :: field_mask = 0
    type(c_funptr) :: sink = c_null_funptr
    type(c_funptr) :: sink_release = c_null_funptr
    integer(c_int32_t) :: unordered = 0
  end type
  type, bind(c) :: slc_send_params
    integer(c_int64_t) :: field_mask = 0
    type(c_ptr) :: header = c_null_ptr
    integer(c_size_t) :: header_size = 0
    type(c_funptr) :: callback = c_null_funptr
    type(c_ptr) :: user_data = c_null_ptr
    integer(c_int32_t) :: flags = 0
  end type
  type, bind(c) :: slc_call_params
    integer(c_int64_t) :: field_mask = 0
    type(c_ptr) :: header = c_null_ptr
    integer(c_size_t) :: header_size = 0
    integer(c_int64_t) :: timeout_ns = 0
    type(c_ptr) :: reply_buffer = c_null_ptr
    integer(c_size_t) :: reply_buffer_size = 0
    integer(c_int32_t) :: flags = 0
  end type
  type, bind(c) :: slc_listen_params
    integer(c_int64_t) :: field_mask = 0
    integer(c_int32_t) :: share_port = 0
  end type
  type, bind(c) :: slc_method_stats
    integer(c_int64_t) :: field_mask = 0
    integer(c_int64_t) :: calls = 0, errors = 0, timed = 0
    integer(c_int64_t) :: p50_ns = 0, p90_ns = 0, p99_ns = 0, max_ns = 0
  end type
  type, bind(c) :: slc_pool_stats
    integer(c_int64_t) :: field_mask = 0
    integer(c_int64_t) :: budget_bytes = 0, mapped_bytes = 0, high_water_bytes = 0
    integer(c_int32_t) :: classes = 0
  end type
  type, bind(c) :: slc_pool_class_stats
    integer(c_int64_t) :: field_mask = 0
    character(kind=c_char) :: name(32) = c_null_char
    integer(c_int64_t) :: slot_size = 0, slots_total = 0, slots_free = 0, slots_max = 0, reserved = 0
    integer(c_int64_t) :: high_water = 0, growth_events = 0, exhaustion_events = 0, cross_thread_returns = 0
  end type

  interface
    ! ---- version and errors ----
    integer(c_int32_t) function slc_init_version(major, minor) bind(c)
      import :: c_int32_t
      integer(c_int32_t), value :: major, minor
    end function
    subroutine slc_get_version(api_major, api_minor, release_major, release_minor, release_patch) bind(c)
      import :: c_int32_t
      integer(c_int32_t), optional :: api_major, api_minor, release_major, release_minor, release_patch
    end subroutine
    type(c_ptr) function slc_strerror(status) bind(c)  ! a static C string
      import :: c_ptr, c_int32_t
      integer(c_int32_t), value :: status
    end function
    type(c_ptr) function slc_last_error() bind(c)  ! this thread's detail, a C string
      import :: c_ptr
    end function

    ! ---- contexts and engines ----
    integer(c_int32_t) function slc_context_create(params, out) bind(c)
      import :: c_int32_t, slc_context_params, slc_context
      type(slc_context_params), intent(in), optional :: params
      type(slc_context), intent(out) :: out
    end function
    subroutine slc_context_destroy(context) bind(c)
      import :: slc_context
      type(slc_context), value :: context
    end subroutine
    integer(c_int32_t) function slc_context_rank(context) bind(c)
      import :: c_int32_t, slc_context
      type(slc_context), value :: context
    end function
    integer(c_int32_t) function slc_context_size(context) bind(c)
      import :: c_int32_t, slc_context
      type(slc_context), value :: context
    end function
    integer(c_int32_t) function slc_engine_create(context, params, out) bind(c)
      import :: c_int32_t, slc_context, slc_engine_params, slc_engine
      type(slc_context), value :: context
      type(slc_engine_params), intent(in), optional :: params
      type(slc_engine), intent(out) :: out
    end function
    subroutine slc_engine_destroy(engine) bind(c)
      import :: slc_engine
      type(slc_engine), value :: engine
    end subroutine
    integer(c_int32_t) function slc_engine_rank(engine) bind(c)
      import :: c_int32_t, slc_engine
      type(slc_engine), value :: engine
    end function
    integer(c_int32_t) function slc_engine_size(engine) bind(c)
      import :: c_int32_t, slc_engine
      type(slc_engine), value :: engine
    end function
    integer(c_size_t) function slc_engine_eager_limit(engine) bind(c)
      import :: c_size_t, slc_engine
      type(slc_engine), value :: engine
    end function
    integer(c_int32_t) function slc_engine_peer(engine, rank, out) bind(c)
      import :: c_int32_t, slc_engine, slc_peer
      type(slc_engine), value :: engine
      integer(c_int32_t), value :: rank
      type(slc_peer), intent(out) :: out
    end function
    integer(c_int32_t) function slc_engine_listen(engine, host_port, length, params, port) bind(c)
      import :: c_int32_t, c_char, c_size_t, slc_engine, slc_listen_params
      type(slc_engine), value :: engine
      character(kind=c_char), intent(in) :: host_port(*)
      integer(c_size_t), value :: length
      type(slc_listen_params), intent(in), optional :: params
      integer(c_int32_t), intent(out) :: port  ! pass as port=, after an omitted params
    end function
    integer(c_int32_t) function slc_engine_connect(engine, host_port, length, timeout_ns, out) bind(c)
      import :: c_int32_t, c_int64_t, c_char, c_size_t, slc_engine, slc_peer
      type(slc_engine), value :: engine
      character(kind=c_char), intent(in) :: host_port(*)
      integer(c_size_t), value :: length
      integer(c_int64_t), value :: timeout_ns
      type(slc_peer), intent(out) :: out
    end function
    integer(c_int32_t) function slc_peer_rank(peer) bind(c)
      import :: c_int32_t, slc_peer
      type(slc_peer), value :: peer
    end function
    integer(c_int32_t) function slc_peer_id(peer) bind(c)  ! uint32_t in C
      import :: c_int32_t, slc_peer
      type(slc_peer), value :: peer
    end function
    integer(c_int32_t) function slc_peer_alive(peer) bind(c)
      import :: c_int32_t, slc_peer
      type(slc_peer), value :: peer
    end function

    ! ---- handlers and messages ----
    integer(c_int32_t) function slc_engine_register(engine, id, fn, user_data, params) bind(c)
      import :: c_int32_t, c_int16_t, c_funptr, c_ptr, slc_engine, slc_handler_params
      type(slc_engine), value :: engine
      integer(c_int16_t), value :: id
      type(c_funptr), value :: fn  ! subroutine(msg, user_data) bind(c); type(slc_msg), value; type(c_ptr), value
      type(c_ptr), value :: user_data
      type(slc_handler_params), intent(in), optional :: params
    end function
    integer(c_int32_t) function slc_engine_unregister(engine, id) bind(c)
      import :: c_int32_t, c_int16_t, slc_engine
      type(slc_engine), value :: engine
      integer(c_int16_t), value :: id
    end function
    integer(c_int32_t) function slc_msg_source(msg) bind(c)
      import :: c_int32_t, slc_msg
      type(slc_msg), value :: msg
    end function
    integer(c_int16_t) function slc_msg_handler(msg) bind(c)
      import :: c_int16_t, slc_msg
      type(slc_msg), value :: msg
    end function
    integer(c_int32_t) function slc_msg_is_request(msg) bind(c)
      import :: c_int32_t, slc_msg
      type(slc_msg), value :: msg
    end function
    type(c_ptr) function slc_msg_header(msg, size) bind(c)
      import :: c_ptr, c_size_t, slc_msg
      type(slc_msg), value :: msg
      integer(c_size_t), intent(out) :: size
    end function
    type(c_ptr) function slc_msg_payload(msg, size) bind(c)
      import :: c_ptr, c_size_t, slc_msg
      type(slc_msg), value :: msg
      integer(c_size_t), intent(out) :: size
    end function
    integer(c_int32_t) function slc_msg_keep(msg, kept) bind(c)
      import :: c_int32_t, slc_msg
      type(slc_msg), value :: msg
      type(slc_msg), intent(out) :: kept
    end function
    subroutine slc_msg_release(msg) bind(c)
      import :: slc_msg
      type(slc_msg), value :: msg
    end subroutine

    ! ---- sends, calls, replies ----
    integer(c_int32_t) function slc_send(peer, handler, payload, size, params) bind(c)
      import :: c_int32_t, c_int16_t, c_ptr, c_size_t, slc_peer, slc_send_params
      type(slc_peer), value :: peer
      integer(c_int16_t), value :: handler
      type(c_ptr), value :: payload
      integer(c_size_t), value :: size
      type(slc_send_params), intent(in), optional :: params
    end function
    integer(c_int32_t) function slc_call(peer, method, payload, size, params, on_reply, user_data, request) bind(c)
      import :: c_int32_t, c_int16_t, c_ptr, c_funptr, c_size_t, slc_peer, slc_call_params, slc_request
      type(slc_peer), value :: peer
      integer(c_int16_t), value :: method
      type(c_ptr), value :: payload
      integer(c_size_t), value :: size
      type(slc_call_params), intent(in), optional :: params
      type(c_funptr), value :: on_reply  ! subroutine(status, reply, user_data) bind(c)
      type(c_ptr), value :: user_data
      type(slc_request), intent(out), optional :: request
    end function
    integer(c_int32_t) function slc_engine_cancel(engine, request) bind(c)
      import :: c_int32_t, slc_engine, slc_request
      type(slc_engine), value :: engine
      type(slc_request), value :: request
    end function
    integer(c_int32_t) function slc_msg_reply(request, payload, size, params) bind(c)
      import :: c_int32_t, c_ptr, c_size_t, slc_msg, slc_send_params
      type(slc_msg), value :: request
      type(c_ptr), value :: payload
      integer(c_size_t), value :: size
      type(slc_send_params), intent(in), optional :: params
    end function
    integer(c_int32_t) function slc_msg_reply_error(request, status, message, length) bind(c)
      import :: c_int32_t, c_char, c_size_t, slc_msg
      type(slc_msg), value :: request
      integer(c_int32_t), value :: status
      character(kind=c_char), intent(in) :: message(*)
      integer(c_size_t), value :: length
    end function

    ! ---- registered send memory ----
    integer(c_int32_t) function slc_engine_try_get_send_slot(engine, size, out) bind(c)
      import :: c_int32_t, c_size_t, slc_engine, slc_mem
      type(slc_engine), value :: engine
      integer(c_size_t), value :: size
      type(slc_mem), intent(out) :: out
    end function
    type(c_ptr) function slc_mem_data(mem, size) bind(c)
      import :: c_ptr, c_size_t, slc_mem
      type(slc_mem), value :: mem
      integer(c_size_t), intent(out), optional :: size
    end function
    subroutine slc_mem_release(mem) bind(c)
      import :: slc_mem
      type(slc_mem), value :: mem
    end subroutine
    integer(c_int32_t) function slc_send_mem(peer, handler, payload, length, params) bind(c)
      import :: c_int32_t, c_int16_t, c_size_t, slc_peer, slc_mem, slc_send_params
      type(slc_peer), value :: peer
      integer(c_int16_t), value :: handler
      type(slc_mem), value :: payload
      integer(c_size_t), value :: length
      type(slc_send_params), intent(in), optional :: params
    end function
    integer(c_int32_t) function slc_msg_reply_mem(request, payload, length, params) bind(c)
      import :: c_int32_t, c_size_t, slc_msg, slc_mem, slc_send_params
      type(slc_msg), value :: request
      type(slc_mem), value :: payload
      integer(c_size_t), value :: length
      type(slc_send_params), intent(in), optional :: params
    end function

    ! ---- progress and statistics ----
    integer(c_int32_t) function slc_engine_progress(engine) bind(c)
      import :: c_int32_t, slc_engine
      type(slc_engine), value :: engine
    end function
    integer(c_int32_t) function slc_engine_run_until(engine, done, user_data, timeout_ns) bind(c)
      import :: c_int32_t, c_int64_t, c_funptr, c_ptr, slc_engine
      type(slc_engine), value :: engine
      type(c_funptr), value :: done  ! integer(c_int32_t) function(user_data) bind(c)
      type(c_ptr), value :: user_data
      integer(c_int64_t), value :: timeout_ns
    end function
    integer(c_int32_t) function slc_engine_wait(engine, timeout_ns) bind(c)
      import :: c_int32_t, c_int64_t, slc_engine
      type(slc_engine), value :: engine
      integer(c_int64_t), value :: timeout_ns
    end function
    integer(c_int32_t) function slc_engine_post(engine, fn, user_data) bind(c)
      import :: c_int32_t, c_funptr, c_ptr, slc_engine
      type(slc_engine), value :: engine
      type(c_funptr), value :: fn
      type(c_ptr), value :: user_data
    end function
    integer(c_int32_t) function slc_engine_barrier(engine, timeout_ns) bind(c)
      import :: c_int32_t, c_int64_t, slc_engine
      type(slc_engine), value :: engine
      integer(c_int64_t), value :: timeout_ns
    end function
    integer(c_int32_t) function slc_engine_release_thread(engine) bind(c)
      import :: c_int32_t, slc_engine
      type(slc_engine), value :: engine
    end function
    integer(c_int32_t) function slc_engine_stat(engine, name, length, value) bind(c)
      import :: c_int32_t, c_int64_t, c_char, c_size_t, slc_engine
      type(slc_engine), value :: engine
      character(kind=c_char), intent(in) :: name(*)
      integer(c_size_t), value :: length
      integer(c_int64_t), intent(out) :: value
    end function
    integer(c_int32_t) function slc_engine_stat_id(engine, name, length, id) bind(c)
      import :: c_int32_t, c_char, c_size_t, slc_engine
      type(slc_engine), value :: engine
      character(kind=c_char), intent(in) :: name(*)
      integer(c_size_t), value :: length
      integer(c_int32_t), intent(out) :: id  ! uint32_t in C
    end function
    integer(c_int32_t) function slc_engine_stat_by_id(engine, id, value) bind(c)
      import :: c_int32_t, c_int64_t, slc_engine
      type(slc_engine), value :: engine
      integer(c_int32_t), value :: id
      integer(c_int64_t), intent(out) :: value
    end function
    integer(c_int32_t) function slc_engine_stat_name(engine, id, name, length) bind(c)
      import :: c_int32_t, c_ptr, c_size_t, slc_engine
      type(slc_engine), value :: engine
      integer(c_int32_t), value :: id
      type(c_ptr), intent(out) :: name  ! not NUL-terminated: `length` characters
      integer(c_size_t), intent(out), optional :: length
    end function
    integer(c_int32_t) function slc_engine_method_stats(engine, method, server, out) bind(c)
      import :: c_int32_t, c_int16_t, slc_engine, slc_method_stats
      type(slc_engine), value :: engine
      integer(c_int16_t), value :: method
      integer(c_int32_t), value :: server
      type(slc_method_stats), intent(inout) :: out  ! set out%field_mask first
    end function
    integer(c_int32_t) function slc_engine_pool_stats(engine, direction, out) bind(c)
      import :: c_int32_t, slc_engine, slc_pool_stats
      type(slc_engine), value :: engine
      integer(c_int32_t), value :: direction
      type(slc_pool_stats), intent(inout) :: out
    end function
    integer(c_int32_t) function slc_engine_pool_class_stats(engine, direction, index, out) bind(c)
      import :: c_int32_t, slc_engine, slc_pool_class_stats
      type(slc_engine), value :: engine
      integer(c_int32_t), value :: direction, index
      type(slc_pool_class_stats), intent(inout) :: out
    end function
  end interface
end module sluice
