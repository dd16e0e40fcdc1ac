# gdb script: the UCX shared-memory state of the two engines of a RankPair test process
# (tests/testing/ranks.h); it showed what the "stall" of docs/reliability.md was. Needs a
# UCX with debug symbols (built from Debian's source: apt-get source ucx, ./autogen.sh,
# configure with CFLAGS="-O3 -g", run the test with LD_LIBRARY_PATH pointing at it).
#   gdb -p PID -batch -x scripts/debug/ucx-state.gdb -ex 'thread apply all bt 10'
# Prints per worker: its progress queue, each interface (mm: FIFO head, tail, read index, the
# owner/inline flags of the element at the read index, whether sends wait), and per endpoint
# lane the remote FIFO's head and tail as the sender sees them.
set pagination off
define ifdump
  set $mi = (uct_mm_iface_t*)$arg0
  printf "    mm: ctl head=0x%lx tail=%lu read_index=%lu elem_flags=0x%x shift=%d poll_count=%u arbiter_empty=%d last_recv_desc=%p\n", $mi->recv_fifo_ctl->head, $mi->recv_fifo_ctl->tail, $mi->read_index, $mi->read_index_elem->flags, $mi->fifo_shift, $mi->fifo_poll_count, ($mi->arbiter.list.next == &$mi->arbiter.list), $mi->last_recv_desc
end
define wdump
  set $w = (ucp_worker_h)$arg0
  printf "worker %p num_ifaces %d num_active %d\n", $w, $w->num_ifaces, $w->num_active_ifaces
  set $q = &((uct_worker_t*)$w->uct)->progress_q
  set $k = 0
  while $k < 8
    if $q->fast_elems[$k].cb != 0
      printf "  progress_q[%d] ", $k
      info symbol $q->fast_elems[$k].cb
      printf "     arg %p\n", $q->fast_elems[$k].arg
    end
    set $k = $k + 1
  end
  set $i = 0
  while $i < $w->num_ifaces
    set $wi = $w->ifaces[$i]
    printf "  iface %d %s/%s iface=%p activate_count=%d flags=0x%x\n", $i, $w->context->tl_rscs[$wi->rsc_index].tl_rsc.tl_name, $w->context->tl_rscs[$wi->rsc_index].tl_rsc.dev_name, $wi->iface, $wi->activate_count, $wi->flags
    if $_streq($w->context->tl_rscs[$wi->rsc_index].tl_rsc.tl_name, "sysv") || $_streq($w->context->tl_rscs[$wi->rsc_index].tl_rsc.tl_name, "posix")
      ifdump $wi->iface
      if $_streq($w->context->tl_rscs[$wi->rsc_index].tl_rsc.tl_name, "sysv")
        set $mmif0 = $wi->iface
      else
        set $mmif1 = $wi->iface
      end
    end
    set $i = $i + 1
  end
end
define epdump
  set $e = (ucp_ep_h)$arg0
  printf "ep %p flags 0x%x am_lane %d tag_lane %d num_lanes %d\n", $e, $e->flags, $e->worker->ep_config[$e->cfg_index].key.am_lane, $e->worker->ep_config[$e->cfg_index].key.tag_lane, $e->worker->ep_config[$e->cfg_index].key.num_lanes
  set $l = 0
  while $l < $e->worker->ep_config[$e->cfg_index].key.num_lanes
    set $u = (uct_ep_t*)$e->uct_eps[$l]
    printf "  lane %d uct_ep %p iface %p\n", $l, $u, $u->iface
    if $u->iface == $mmif0 || $u->iface == $mmif1
      mmep $u
    end
    set $l = $l + 1
  end
end
define mmep
  set $m = (uct_mm_ep_t*)$arg0
  printf "    mm ep: remote head=0x%lx remote tail=%lu cached_tail=%lu arb_group_tail=%p\n", $m->fifo_ctl->head, $m->fifo_ctl->tail, $m->cached_tail, $m->arb_group.tail
end
thread 1
python
f = gdb.newest_frame()
while f is not None:
    try:
        t = f.read_var('this')
        if 'RankPair' in str(t.type):
            gdb.set_convenience_variable('rp', t)
            break
    except Exception:
        pass
    f = f.older()
end
set $c0 = $rp->engines_[0].get()->core_.get()
set $c1 = $rp->engines_[1].get()->core_.get()
printf "core0 %p core1 %p\n", $c0, $c1
p $c0->tx_inflight_
p $c1->tx_inflight_
p $c0->peers_[1].get()->ctrl_busy
p $c1->peers_[0].get()->ctrl_busy
p $c0->peers_[1].get()->credits
p $c1->peers_[0].get()->owed
set $w0 = $c0->worker_.get()->worker_
set $w1 = $c1->worker_.get()->worker_
wdump $w0
epdump $c0->peers_[1].get()->ep.ep_
wdump $w1
epdump $c1->peers_[0].get()->ep.ep_
p $c0->peers_[1].get()->sent_seq
p $c1->peers_[0].get()->window
