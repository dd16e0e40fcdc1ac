! rpc_client (Fortran): the client side of rpc.c's protocol, so a Fortran program calls a C server:
! echoes (one into a reply buffer), an error reply, an unknown method, then a stop.
!
!   build/apps/sluice-run -n 2 sh -c '[ $SLUICE_RANK = 0 ] && exec rpc_c || exec rpc_client_f'
!   rpc_client_f connect 127.0.0.1:PORT       (against rpc_c listen 127.0.0.1:0)
module rpc_client_state
  use, intrinsic :: iso_c_binding
  use sluice
  implicit none
  integer(c_int16_t), parameter :: kEcho = 10, kFail = 11, kStop = 13, kUnknown = 99
  integer(c_int32_t) :: status = SLC_IN_PROGRESS  ! the current call's outcome
  integer(c_size_t) :: reply_size = 0
  character(kind=c_char), target :: reply(64)
contains
  subroutine on_reply(st, msg, user_data) bind(c)
    integer(c_int32_t), value :: st
    type(slc_msg), value :: msg
    type(c_ptr), value :: user_data
    character(kind=c_char), pointer :: bytes(:)
    type(c_ptr) :: payload
    reply_size = 0
    if (st == SLC_OK) then
      payload = slc_msg_payload(msg, reply_size)
      if (c_associated(payload) .and. reply_size <= size(reply)) then
        call c_f_pointer(payload, bytes, [reply_size])
        reply(1:reply_size) = bytes
      end if
    end if
    if (c_associated(user_data)) st = SLC_ERR_INVALID  ! called without user data
    status = st
  end subroutine

  integer(c_int32_t) function answered(user_data) bind(c)
    type(c_ptr), value :: user_data
    answered = merge(1, 0, status /= SLC_IN_PROGRESS .or. c_associated(user_data))
  end function

  ! Calls `method` with `text` and waits for its reply; returns the call's or the reply's status.
  integer(c_int32_t) function call(eng, peer, method, text, params) result(r)
    type(slc_engine), intent(in) :: eng
    type(slc_peer), intent(in) :: peer
    integer(c_int16_t), intent(in) :: method
    character(kind=c_char, len=*), intent(in), target :: text
    type(slc_call_params), intent(in), optional :: params
    status = SLC_IN_PROGRESS
    do
      r = slc_call(peer, method, c_loc(text), len(text, kind=c_size_t), params, c_funloc(on_reply), c_null_ptr)
      if (r /= SLC_ERR_WOULD_BLOCK) exit
      r = slc_engine_progress(eng)
    end do
    if (r /= SLC_OK) return
    r = slc_engine_run_until(eng, c_funloc(answered), c_null_ptr, 10000000000_c_int64_t)
    if (r == SLC_OK) r = status
  end function
end module rpc_client_state

program rpc_client
  use rpc_client_state
  implicit none
  type(slc_context) :: ctx
  type(slc_engine) :: eng
  type(slc_peer) :: peer
  type(slc_call_params) :: params
  character(kind=c_char), target :: landing(16)
  character(len=64) :: mode, address
  integer(c_int32_t) :: r
  integer :: i, bad, rank, ranks
  r = slc_init_version(SLC_API_VERSION_MAJOR, SLC_API_VERSION_MINOR)
  if (r == SLC_OK) r = slc_context_create(out=ctx)
  if (r == SLC_OK) r = slc_engine_create(ctx, out=eng)
  if (r /= SLC_OK) error stop 'rpc_client_f: context or engine failed'
  rank = slc_engine_rank(eng)
  ranks = slc_engine_size(eng)
  mode = ''
  if (command_argument_count() >= 2) call get_command_argument(1, mode)
  if (mode == 'connect') then
    call get_command_argument(2, address)
    r = slc_engine_connect(eng, trim(address), len_trim(address, kind=c_size_t), 0_c_int64_t, peer)
  else if (ranks == 2 .and. rank == 1) then
    r = slc_engine_peer(eng, 0, peer)
    if (r == SLC_OK) r = slc_engine_barrier(eng, SLC_TIMEOUT_INFINITE)  ! the server registered its methods
  else
    error stop 'rpc_client_f: run as rank 1 of two (rank 0: rpc_c), or as connect ADDR'
  end if
  if (r /= SLC_OK) error stop 'rpc_client_f: no server'
  bad = 0
  do i = 1, 100
    if (call(eng, peer, kEcho, 'hello') /= SLC_OK .or. reply_size /= 5) bad = bad + 1
  end do
  if (bad == 0 .and. any(reply(1:5) /= ['h', 'e', 'l', 'l', 'o'])) bad = 1
  params%field_mask = SLC_CALL_PARAM_REPLY_BUFFER
  params%reply_buffer = c_loc(landing)
  params%reply_buffer_size = size(landing)
  if (call(eng, peer, kEcho, 'landed', params) /= SLC_OK) bad = bad + 1
  if (any(landing(1:6) /= ['l', 'a', 'n', 'd', 'e', 'd'])) bad = bad + 1
  if (call(eng, peer, kFail, ' ') /= SLC_ERR_NOT_FOUND) bad = bad + 1
  if (call(eng, peer, kUnknown, ' ') /= SLC_ERR_UNIMPLEMENTED) bad = bad + 1
  if (call(eng, peer, kStop, ' ') /= SLC_OK) bad = bad + 1
  call slc_engine_destroy(eng)
  call slc_context_destroy(ctx)
  if (bad /= 0) then
    write (0, '(a,i0,a)') 'rpc_client_f: ', bad, ' calls went wrong'
    stop 1
  end if
  print '(a)', 'rpc_client_f: 101 calls answered, error and unknown method as expected'
end program rpc_client
