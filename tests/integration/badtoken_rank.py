#!/usr/bin/env python3
"""A rank that first knocks on sluice-run's bootstrap service with a wrong token (and with a
malformed frame), checks it is refused, then becomes the real program (os.execv)."""
import os
import socket
import struct
import sys

if os.environ.get("SLUICE_RANK") == "0":
    addr = os.environ["SLUICE_BOOT_ADDR"]
    for body in (b"0000deadbeef FENCE 0 1\n", b"\xff\xff\xff\xff"):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(addr)
        if body.startswith(b"\xff"):
            s.sendall(body)  # a frame claiming 4 GiB
        else:
            s.sendall(struct.pack("<I", len(body)) + body)
        s.settimeout(10)
        reply = s.recv(4096)
        s.close()
        if b"ERR" not in reply:
            print("bad token was not refused: %r" % reply, file=sys.stderr)
            sys.exit(9)
    print("bad requests refused", flush=True)
os.execv(sys.argv[1], sys.argv[1:])
