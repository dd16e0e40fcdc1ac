"""A gdb script (gdb -batch -x fifo_wedge.py --args PROGRAM ARGS...): runs PROGRAM until its first
send into another process's UCX shared-memory FIFO (uct_mm_ep_am_short or _bcopy), steps to just
past the compare-and-swap that claims the FIFO's head element, and kills it there: the element is
claimed and never marked written, as when a process is killed at that instant (UCX 1.13).
FIFO_WEDGE_SKIP=N lets its first N such sends through. FIFO_WEDGE_HOLD=S holds the process there
for S seconds instead and then lets it go on, as a process stopped or starved of CPU at that
instant runs again."""
import os
import time

import gdb

gdb.execute("set pagination off")
gdb.execute("set breakpoint pending on")
gdb.execute("set confirm off")
SKIP = int(os.environ.get("FIFO_WEDGE_SKIP", "0"))  # sends let through first (a client mid-traffic)
HOLD = float(os.environ.get("FIFO_WEDGE_HOLD", "0"))  # seconds held past the claim, then let go


class Send(gdb.Breakpoint):
    seen = 0

    def stop(self):
        Send.seen += 1
        return Send.seen > SKIP


for fn in ("uct_mm_ep_am_short", "uct_mm_ep_am_bcopy"):
    Send(fn)
gdb.execute("run")
claimed = False
if not gdb.selected_inferior().pid:  # it ended (over a transport without such a FIFO)
    print("fifo_wedge: the program ended without a send into a shared-memory FIFO")
    raise SystemExit
for steps in range(20000):
    insn = gdb.execute("x/i $pc", to_string=True)
    gdb.execute("stepi", to_string=True)
    # The swap fails (ZF clear) when another sender moved the head meanwhile: UCX retries.
    if "cmpxchg" in insn and int(gdb.parse_and_eval("$eflags")) & 0x40:
        print("fifo_wedge: claimed a FIFO element after %d instructions (%s); %s"
              % (steps, insn.split("\t")[-1].strip(), "held %g s" % HOLD if HOLD else "killed"), flush=True)
        claimed = True
        break
if not claimed:
    print("fifo_wedge: no successful compare-and-swap within 20000 instructions")
if claimed and HOLD:
    time.sleep(HOLD)
    gdb.execute("detach")  # it finishes its write and runs on
else:
    gdb.execute("kill")
