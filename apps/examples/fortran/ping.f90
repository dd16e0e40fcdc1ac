! ping (Fortran): two ranks bounce a message back and forth through the `sluice` module, speaking
! ping.cpp's protocol (handler 1), so either rank may be the C or C++ program.
!
!   build/apps/sluice-run -n 2 build/apps/examples/ping_f [ITERATIONS]
module ping_state
  use, intrinsic :: iso_c_binding
  use sluice
  implicit none
  integer(c_int16_t), parameter :: kPing = 1
  type(slc_peer) :: other
  integer :: me = 0, iterations = 10000, received = 0
  logical :: due = .false.
  integer(c_int32_t) :: failure = SLC_OK
  integer(c_int8_t), target :: buffer(8) = 0
contains
  ! Sends one message; one refused for lack of credit stays due and is retried by done().
  subroutine send_one()
    integer(c_int32_t) :: r
    r = slc_send(other, kPing, c_loc(buffer), int(size(buffer), c_size_t))
    due = r == SLC_ERR_WOULD_BLOCK
    if (r /= SLC_OK .and. .not. due) failure = r
  end subroutine

  subroutine on_ping(msg, user_data) bind(c)
    type(slc_msg), value :: msg
    type(c_ptr), value :: user_data
    integer(c_size_t) :: n
    type(c_ptr) :: payload
    payload = slc_msg_payload(msg, n)
    if (c_associated(user_data)) failure = SLC_ERR_INVALID  ! registered without user data
    received = received + 1
    if (n /= size(buffer)) failure = SLC_ERR_DATA_LOSS
    if (me == 1 .or. received < iterations) call send_one()
  end subroutine

  integer(c_int32_t) function done(user_data) bind(c)
    type(c_ptr), value :: user_data
    if (c_associated(user_data)) failure = SLC_ERR_INVALID  ! run without user data
    if (due) call send_one()
    done = slc_peer_alive(other)  ! 0 when the other rank failed: the wait is over
    done = merge(1, 1 - done, (received == iterations .and. .not. due) .or. failure /= SLC_OK)
  end function

  ! This thread's last error detail, as Fortran text.
  function last_error() result(text)
    character(len=:), allocatable :: text
    character(kind=c_char), pointer :: chars(:)
    integer :: n
    call c_f_pointer(slc_last_error(), chars, [4096])
    n = 0
    do while (chars(n + 1) /= c_null_char)
      n = n + 1
    end do
    allocate (character(len=n) :: text)
    text = transfer(chars(1:n), text)
  end function
end module ping_state

program ping
  use ping_state
  implicit none
  type(slc_context) :: ctx
  type(slc_engine) :: eng
  integer(c_int32_t) :: r
  character(len=32) :: arg
  if (command_argument_count() > 0) then
    call get_command_argument(1, arg)
    read (arg, *) iterations
  end if
  r = slc_init_version(SLC_API_VERSION_MAJOR, SLC_API_VERSION_MINOR)
  if (r == SLC_OK) r = slc_context_create(out=ctx)
  if (r /= SLC_OK) call fail('context', r)
  if (slc_context_size(ctx) /= 2) then
    write (0, '(a)') 'ping_f: run with two ranks (sluice-run -n 2 ...)'
    stop 1
  end if
  r = slc_engine_create(ctx, out=eng)
  if (r /= SLC_OK) call fail('engine', r)
  me = slc_engine_rank(eng)
  r = slc_engine_peer(eng, 1 - me, other)
  if (r /= SLC_OK) call fail('peer', r)
  r = slc_engine_register(eng, kPing, c_funloc(on_ping), c_null_ptr)
  if (r /= SLC_OK) call fail('register', r)
  if (me == 0) call send_one()
  r = slc_engine_run_until(eng, c_funloc(done), c_null_ptr, SLC_TIMEOUT_INFINITE)
  if (failure == SLC_OK .and. received /= iterations) failure = SLC_ERR_UNAVAILABLE
  if (failure /= SLC_OK) call fail('ping', failure)
  if (me == 0) print '(a,i0,a)', 'ping_f: ', iterations, ' round trips of 8 bytes'
  call slc_engine_destroy(eng)
  call slc_context_destroy(ctx)
contains
  subroutine fail(what, status)
    character(len=*), intent(in) :: what
    integer(c_int32_t), intent(in) :: status
    write (0, '(a,a,a,i0,a,a)') 'ping_f: ', what, ': status ', status, ': ', last_error()
    stop 1
  end subroutine
end program ping
