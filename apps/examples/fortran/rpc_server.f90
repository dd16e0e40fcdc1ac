! rpc_server (Fortran): the server side of rpc.c's protocol, so C and Fortran clients call a
! Fortran server: echoes (answered from a registered send slot), an error reply, held requests
! answered at the stop; then it prints how many echo calls it served (slc_engine_method_stats).
!
!   build/apps/sluice-run -n 2 sh -c '[ $SLUICE_RANK = 0 ] && exec rpc_server_f || exec rpc_c'
!   rpc_server_f listen 127.0.0.1:0       (prints "listening on PORT"; rpc_c connect 127.0.0.1:PORT)
module rpc_server_state
  use, intrinsic :: iso_c_binding
  use sluice
  implicit none
  integer(c_int16_t), parameter :: kEcho = 10, kFail = 11, kHold = 12, kStop = 13
  type(slc_msg) :: held(4)  ! kHold requests, answered only at the stop
  integer :: nheld = 0
  logical :: stopping = .false.
contains
  ! A slot reply's completion: the slot (its handle is the user data) goes back to the pool.
  subroutine replied(status, user_data) bind(c)
    integer(c_int32_t), value :: status
    type(c_ptr), value :: user_data
    call slc_mem_release(slc_mem(user_data))
    if (status /= SLC_OK) write (0, '(a,i0)') 'rpc_server_f: a reply was lost: ', status
  end subroutine

  ! Echoes the request's payload from a send slot of `eng`; the completion releases the slot.
  subroutine echo(eng, msg)
    type(slc_engine), intent(in) :: eng
    type(slc_msg), intent(in) :: msg
    type(slc_mem) :: slot
    type(slc_send_params) :: done
    character(kind=c_char), pointer :: from(:), to(:)
    integer(c_size_t) :: size
    type(c_ptr) :: payload
    integer(c_int32_t) :: r
    payload = slc_msg_payload(msg, size)
    r = slc_engine_try_get_send_slot(eng, max(size, 1_c_size_t), slot)
    if (r /= SLC_OK) then
      r = slc_msg_reply_error(msg, r, 'no send slot', 12_c_size_t)
      return
    end if
    if (size > 0) then
      call c_f_pointer(payload, from, [size])
      call c_f_pointer(slc_mem_data(slot), to, [size])
      to = from
    end if
    done%field_mask = SLC_SEND_PARAM_CALLBACK
    done%callback = c_funloc(replied)
    done%user_data = slot%ptr
    r = slc_msg_reply_mem(msg, slot, size, done)
    if (r /= SLC_OK) call slc_mem_release(slot)
  end subroutine

  ! Every method's handler; its user data is the engine.
  subroutine serve(msg, user_data) bind(c)
    type(slc_msg), value :: msg
    type(c_ptr), value :: user_data
    type(slc_send_params) :: copy
    integer(c_int32_t) :: r
    copy%field_mask = SLC_SEND_PARAM_FLAGS
    copy%flags = SLC_SEND_FLAG_COPY
    select case (slc_msg_handler(msg))
    case (kEcho)
      call echo(slc_engine(user_data), msg)
    case (kFail)
      r = slc_msg_reply_error(msg, SLC_ERR_NOT_FOUND, 'no such block', 13_c_size_t)
    case (kHold)
      if (nheld < size(held)) then
        if (slc_msg_keep(msg, held(nheld + 1)) == SLC_OK) nheld = nheld + 1
      else
        r = slc_msg_reply_error(msg, SLC_ERR_REFUSED, 'holding too many', 16_c_size_t)
      end if
    case (kStop)
      do while (nheld > 0)
        r = slc_msg_reply(held(nheld), c_null_ptr, 0_c_size_t, copy)
        call slc_msg_release(held(nheld))
        nheld = nheld - 1
      end do
      r = slc_msg_reply(msg, c_null_ptr, 0_c_size_t, copy)
      stopping = .true.
    end select
  end subroutine

  integer(c_int32_t) function stopped(user_data) bind(c)
    type(c_ptr), value :: user_data
    stopped = merge(1, 0, stopping .or. c_associated(user_data))
  end function
end module rpc_server_state

program rpc_server
  use, intrinsic :: iso_fortran_env, only: output_unit
  use rpc_server_state
  implicit none
  type(slc_context) :: ctx
  type(slc_engine) :: eng
  type(slc_method_stats) :: served
  character(len=64) :: mode, address
  integer(c_int16_t) :: methods(4) = [kEcho, kFail, kHold, kStop]
  integer(c_int32_t) :: r, port, rank, ranks
  integer :: i
  r = slc_init_version(SLC_API_VERSION_MAJOR, SLC_API_VERSION_MINOR)
  if (r == SLC_OK) r = slc_context_create(out=ctx)
  if (r == SLC_OK) r = slc_engine_create(ctx, out=eng)
  if (r /= SLC_OK) error stop 'rpc_server_f: context or engine failed'
  do i = 1, size(methods)
    if (slc_engine_register(eng, methods(i), c_funloc(serve), eng%ptr) /= SLC_OK) error stop 'rpc_server_f: register'
  end do
  rank = slc_engine_rank(eng)
  ranks = slc_engine_size(eng)
  mode = ''
  if (command_argument_count() >= 2) call get_command_argument(1, mode)
  if (mode == 'listen') then
    call get_command_argument(2, address)
    r = slc_engine_listen(eng, trim(address), len_trim(address, kind=c_size_t), port=port)
    if (r /= SLC_OK) error stop 'rpc_server_f: cannot listen'
    print '(a,i0)', 'listening on ', port
    flush (output_unit)
  else if (ranks == 2 .and. rank == 0) then
    r = slc_engine_barrier(eng, SLC_TIMEOUT_INFINITE)  ! the client waits for the methods
  else
    error stop 'rpc_server_f: run as rank 0 of two (rank 1: rpc_c or rpc_client_f), or as listen ADDR'
  end if
  r = slc_engine_run_until(eng, c_funloc(stopped), c_null_ptr, 60000000000_c_int64_t)
  served%field_mask = SLC_METHOD_STATS_FIELD_COUNTS
  if (r == SLC_OK) r = slc_engine_method_stats(eng, kEcho, 1, served)
  call slc_engine_destroy(eng)
  call slc_context_destroy(ctx)
  if (r /= SLC_OK) error stop 'rpc_server_f: no stop call within 60 s'
  print '(a,i0,a)', 'rpc_server_f: served ', served%calls, ' echo calls'
end program rpc_server
