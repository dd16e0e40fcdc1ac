"""The front door under hostile input (docs/reliability.md, "bad input from the network"), a server
killed and restarted on its address, and 256 clients connecting at once.

The hostile suite talks to a real `blockstore serve` over TCP loopback with raw sockets, and
speaks the pre-handshake itself where an attack needs it (docs/wire-protocol.md, "The front
door"): HMAC-SHA-256 keyed with the BLAKE2b-256 hash of the key file's secret, as libsodium
computes them. After every attack the server must be alive, its file descriptors and resident
memory back within a small bound, and a legitimate client must connect and call at once."""
import hashlib
import hmac
import multiprocessing
import os
import random
import re
import select
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import types
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import BLOCKSTORE, BUILD, closed, open_fds, refusal, serve_blockstore  # noqa: E402

DOOR_CLIENT = os.path.join(BUILD, "tests/door_client")
# The one byte a link may carry: an engine closing in order says goodbye (lib/wire/door.h).
GOODBYE = b"\x42"
MAGIC, VERSION = 0x52444C53, 2
CLIENT_HELLO, SERVER_HELLO, CLIENT_PROOF, ACCEPT, REFUSE = 1, 2, 3, 4, 5
BOUNDS = {CLIENT_HELLO: (40, 40), CLIENT_PROOF: (49, 48 + 4096)}
SECRET = b"the hostile suite's shared secret"
SEED = 20261201


def frame(kind, body, length=None):
    return struct.pack("<IBBHII", MAGIC, VERSION, kind, 0, len(body) if length is None else length, 0) + body


def client_hello(nonce):
    return frame(CLIENT_HELLO, nonce + b"\x01" + bytes(7))


def mac(secret, label, nc, ns, slot=None, address=b"", link=0):
    """HMAC-SHA-256 as lib/door/auth.cpp makes it: the label and its zero byte, both nonces, and
    for a CLIENT_PROOF or ACCEPT the slot, the address length, the link byte and the address."""
    key = hashlib.blake2b(secret.rstrip(b" \t\r\n"), digest_size=32).digest()
    msg = label + b"\0" + nc + ns
    if slot is not None:
        msg += struct.pack("<IHB", slot, len(address), link) + address
    return hmac.new(key, msg, hashlib.sha256).digest()


def client_proof(secret, nc, ns, slot=1, address=b"not a UCX worker address"):
    # Only for proofs the server refuses before admission: a key holder's address goes to UCX,
    # which trusts it (docs/security.md).
    proof = mac(secret, b"sluice door v2: client proof", nc, ns, slot, address) if secret else bytes(32)
    has = b"\x01" if secret else b"\x00"
    # proof, has_proof, link (0: no AES, no encryption wanted), 2 reserved, slot, address length
    return frame(CLIENT_PROOF, proof + has + bytes(3) + struct.pack("<IH", slot, len(address)) + bytes(6) + address)


def recv_frame(s, timeout=2.0):
    """(kind, body) of the next frame, or None when the server closed the connection."""
    s.settimeout(timeout)
    data = b""
    try:
        while len(data) < 16:
            chunk = s.recv(16 - len(data))
            if not chunk:
                return None
            data += chunk
        magic, version, kind, flags, length, reserved = struct.unpack("<IBBHII", data)
        assert magic == MAGIC and version == VERSION and length <= 48 + 4096, data
        body = b""
        while len(body) < length:
            chunk = s.recv(length - len(body))
            if not chunk:
                return None
            body += chunk
        return kind, body
    except (ConnectionResetError, socket.timeout):
        return None


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))


class FrontDoorUnderAttack(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        cls.key = os.path.join(cls.dir.name, "key")
        with open(cls.key, "wb") as f:
            f.write(SECRET + b"\n")
        os.chmod(cls.key, 0o600)
        cls.wrong_key = os.path.join(cls.dir.name, "wrong")
        with open(cls.wrong_key, "wb") as f:
            f.write(b"a secret that is not the server's")
        os.chmod(cls.wrong_key, 0o600)
        cls.env = dict(os.environ, SLUICE_AUTH_KEY_FILE=cls.key, SLUICE_HANDSHAKE_TIMEOUT="1s")
        cls.server, cls.port = serve_blockstore(types.SimpleNamespace(addCleanup=cls.addClassCleanup), "127.0.0.1",
                                                cls.env)
        print("seed %d" % SEED)
        cls.legit_call(cls)  # UCX's lazy start-up: the baseline is a server that has served
        time.sleep(0.5)
        cls.fds0, cls.rss0 = open_fds(cls.server.pid), rss_kb(cls.server.pid)

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def legit_call(self, env=None):
        """A real client writes and reads back one block; returns how long that took."""
        t0 = time.monotonic()
        r = subprocess.run([BLOCKSTORE, "check", "127.0.0.1:%d" % self.port, "1"], env=env or self.env,
                           capture_output=True, text=True, timeout=60)
        took = time.monotonic() - t0
        assert r.returncode == 0, r.stdout + r.stderr
        return took

    def connect(self):
        return socket.create_connection(("127.0.0.1", self.port), timeout=5)

    def handshake_to_proof(self, secret=SECRET):
        """A connection that has sent CLIENT_HELLO and read SERVER_HELLO: (socket, nc, ns, the hello sent)."""
        s = self.connect()
        nc = os.urandom(32)
        hello = client_hello(nc)
        s.sendall(hello)
        kind, body = recv_frame(s)
        self.assertEqual(kind, SERVER_HELLO)
        ns = body[:32]
        self.assertEqual(body[32], 2, "the server requires authentication")
        self.assertEqual(body[40:72], mac(SECRET, b"sluice door v2: server hello", nc, ns), "the server proves the key")
        return s, nc, ns, hello

    def assert_still_serving(self, what):
        self.assertIsNone(self.server.poll(), "the server survived: " + what)
        deadline = time.monotonic() + 5
        while open_fds(self.server.pid) > self.fds0 + 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertLessEqual(open_fds(self.server.pid), self.fds0 + 2, "descriptors back after " + what)
        self.assertLess(rss_kb(self.server.pid), self.rss0 + 16 * 1024, "resident memory bounded after " + what)
        took = self.legit_call()
        self.assertLess(took, 3.0, "a legitimate client connected and called at once after " + what)
        print("%s: server alive, %d fds (%d before), %d kB resident (%d before), a client's check took %.2f s"
              % (what, open_fds(self.server.pid), self.fds0, rss_kb(self.server.pid), self.rss0, took))

    def test_random_bytes_and_an_http_request(self):
        rng = random.Random(SEED)
        for n in (1, 15, 16, 17, 100, 4096, 70000):
            s = self.connect()
            try:
                s.sendall(bytes(rng.getrandbits(8) for _ in range(n)))
            except (BrokenPipeError, ConnectionResetError):
                pass  # closed while we were still sending
            self.assertTrue(closed(s), "%d random bytes: connection closed" % n)
            s.close()
        s = self.connect()
        s.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        code, why = refusal(recv_frame(s))
        self.assertEqual(code, 3, "InvalidArgument")
        self.assertIn("bad magic", why)
        s.close()
        # The 17 bytes that aborted UCX's own listener (a connection request cut short).
        s = self.connect()
        s.sendall(struct.pack("<QB7x", 0, 0) + b"x")
        self.assertTrue(closed(s))
        s.close()
        self.assert_still_serving("random bytes, an HTTP request")

    def test_every_length_field_at_and_beyond_its_bound(self):
        for kind, (lo, hi) in BOUNDS.items():
            for length in sorted({0, 1, lo - 1, lo, hi, hi + 1, 2 ** 31, 2 ** 32 - 1}):
                if kind == CLIENT_PROOF:
                    s, nc, ns, _ = self.handshake_to_proof()
                else:
                    s = self.connect()
                s.sendall(struct.pack("<IBBHII", MAGIC, VERSION, kind, 0, length, 0) + bytes(min(length, 64)))
                answer = recv_frame(s, timeout=3)
                if lo <= length <= hi:
                    # A length in bounds: the server waits for the whole body, then judges it
                    # (the zeros sent are a hello of zeros, or a proof cut short) or times out.
                    self.assertTrue(answer is None or answer[0] in (SERVER_HELLO, REFUSE), (kind, length, answer))
                else:
                    self.assertEqual(refusal(answer)[0], 3, (kind, length))
                    self.assertIn("length", refusal(answer)[1])
                s.close()
        # 2^64 - 1: the length and the reserved word after it all ones.
        s = self.connect()
        s.sendall(struct.pack("<IBBH", MAGIC, VERSION, CLIENT_HELLO, 0) + b"\xff" * 8)
        self.assertEqual(refusal(recv_frame(s))[0], 3)
        s.close()
        # The address length inside a proof: 0, 1 off either way, its bound, 2^16 - 1.
        address = b"not a UCX worker address"  # 24 bytes
        for addr_len in (0, 1, 23, 25, 4096, 4097, 65535):
            s, nc, ns, _ = self.handshake_to_proof()
            body = mac(SECRET, b"sluice door v2: client proof", nc, ns, 1, address) + b"\x01" + bytes(3)
            body += struct.pack("<IH", 1, addr_len) + bytes(6) + address
            s.sendall(frame(CLIENT_PROOF, body))
            code, why = refusal(recv_frame(s))
            self.assertEqual(code, 3, (addr_len, why))
            s.close()
        self.assert_still_serving("every length field")

    def record_real_handshake(self, inject=None):
        """What a real client sends through the front door, recorded by a relay between it and the
        server (the UCX traffic after it goes by worker address, not through the relay). With
        `inject`, the relay sends those bytes to the server on the client's link once the server
        has accepted it, and holds the accept back from the client until the server has closed
        that link: the client then sees the accept and the close together and is expected to fail
        (whatever the scheduler does, it cannot finish its work before the server has judged the
        bytes)."""
        relay = socket.socket()
        relay.bind(("127.0.0.1", 0))
        relay.listen(1)
        client = subprocess.Popen([BLOCKSTORE, "check", "127.0.0.1:%d" % relay.getsockname()[1], "1"], env=self.env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        relay.settimeout(10)
        c, _ = relay.accept()
        relay.close()
        s = self.connect()
        recorded = b""
        from_server = 0
        held = None
        expect_ok = inject is None
        other = {c: s, s: c}
        reading = [c, s]
        while reading:
            ready, _, _ = select.select(reading, [], [], 10)
            self.assertTrue(ready, "the relayed client finished")
            for x in ready:
                try:
                    data = x.recv(65536)
                except ConnectionResetError:
                    data = b""
                if not data:  # that side closed: pass what was held and the close on
                    reading.remove(x)
                    try:
                        if x is s and held:
                            c.sendall(held)
                        other[x].shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                    continue
                if x is c:
                    recorded += data
                if x is s and held is not None:
                    held += data
                    continue
                if x is s and inject and from_server + len(data) >= 16 + 72 + 16 + 49:
                    held = data  # SERVER_HELLO and ACCEPT are through: the client waits for them
                    for i, chunk in enumerate(inject if isinstance(inject, list) else [inject]):
                        time.sleep(0.2 if i else 0)  # read apart, each its own event
                        s.sendall(chunk)
                    inject = None
                    continue
                other[x].sendall(data)
                if x is s:
                    from_server += len(data)
        c.close()
        s.close()
        out, err = client.communicate(timeout=30)
        if expect_ok:
            self.assertEqual(client.returncode, 0, out + err)
        self.client_result = (client.returncode, err)
        return recorded

    def test_frames_cut_at_every_byte_and_bytes_beyond_a_frame(self):
        stream = self.record_real_handshake()
        self.assertGreater(len(stream), 16 + 40 + 16 + 48)
        for cut in range(len(stream)):
            s = self.connect()
            s.sendall(stream[:cut])
            s.close()
        # Beyond a frame: a hello with bytes after it is answered, then the bytes are judged as
        # the next frame and refused.
        s = self.connect()
        s.sendall(client_hello(os.urandom(32)) + b"\x00" * 100)
        self.assertEqual(recv_frame(s)[0], SERVER_HELLO)
        self.assertEqual(refusal(recv_frame(s))[0], 3)
        s.close()
        # Beyond the last frame: bytes on an admitted client's link. The server drops that client
        # (its link is for the close only), the client learns at once, and the server goes on.
        t0 = time.monotonic()
        self.record_real_handshake(inject=b"bytes after the handshake")  # (not a goodbye: 'b' is 0x62)
        code, err = self.client_result
        self.assertNotEqual(code, 0, "the client whose link carried bytes was dropped")
        self.assertIn("its connection to us closed", err)
        self.assertNotIn("SLUICE_CONNECT_TIMEOUT", err, "the client failed at once, not at its connect timeout")
        self.assertLess(time.monotonic() - t0, 5)
        # A link carries one byte at most, the goodbye of an engine closing in order (0x42):
        # a second one, or anything after it, drops the client the same way.
        for inject in ([GOODBYE, GOODBYE], [GOODBYE, b"after the goodbye"], [GOODBYE * 2]):
            self.record_real_handshake(inject=inject)
            code, err = self.client_result
            self.assertNotEqual(code, 0, "the client whose link carried %r was dropped" % inject)
            self.assertIn("its connection to us closed", err)
        self.assert_still_serving("frames cut at every byte, bytes beyond a frame and on a link")

    def test_replayed_handshake_and_wrong_keys_are_refused(self):
        # A real client's handshake, recorded and replayed on a new connection: its proof was
        # made for another server nonce.
        recorded = self.record_real_handshake()
        s = self.connect()
        s.sendall(recorded)
        self.assertEqual(recv_frame(s)[0], SERVER_HELLO)
        code, why = refusal(recv_frame(s))
        self.assertEqual(code, 7, "PermissionDenied: " + why)
        s.close()
        # A wrong key, and no key, spoken by hand...
        for secret in (b"not the server's secret at all", None):
            s, nc, ns, _ = self.handshake_to_proof()
            s.sendall(client_proof(secret, nc, ns))
            code, why = refusal(recv_frame(s))
            self.assertEqual(code, 7, why)
            self.assertIn("SLUICE_AUTH_KEY_FILE", why)
            s.close()
        # ...and by the library.
        for env in (dict(self.env, SLUICE_AUTH_KEY_FILE=self.wrong_key),
                    {k: v for k, v in self.env.items() if k != "SLUICE_AUTH_KEY_FILE"}):
            r = subprocess.run([BLOCKSTORE, "check", "127.0.0.1:%d" % self.port, "1"], env=env, capture_output=True,
                               text=True, timeout=60)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("PERMISSION_DENIED", r.stderr)
            self.assertIn("SLUICE_AUTH_KEY_FILE", r.stderr)
        self.assert_still_serving("a replayed handshake, wrong keys")

    def test_two_hundred_silent_connections_and_a_slow_loris(self):
        silent = [self.connect() for _ in range(200)]
        took = self.legit_call()
        print("beside 200 silent connections a client's check took %.2f s" % took)
        self.assertLess(took, 3.0, "silent connections do not keep out a real client")
        for s in silent:
            s.close()
        # One byte of a hello every 200 ms: closed at SLUICE_HANDSHAKE_TIMEOUT=1s.
        s = self.connect()
        t0 = time.monotonic()
        hello = client_hello(os.urandom(32))
        gone = None
        for b in hello:
            try:
                s.send(bytes([b]))
            except (BrokenPipeError, ConnectionResetError):
                gone = time.monotonic() - t0
                break
            time.sleep(0.2)
        if gone is None:
            self.assertTrue(closed(s, timeout=3))
            gone = time.monotonic() - t0
        print("a slow-loris client was closed after %.2f s" % gone)
        self.assertLess(gone, 3.0)
        s.close()
        self.assert_still_serving("200 silent connections, a slow-loris client")


def flood_door(port, seconds, partial):
    """One flooding process: connections opened as fast as it can, each left silent or with
    a partial CLIENT_HELLO (`partial`: every other one), the oldest closed beyond 256 open. They
    close with a reset, leaving no TIME-WAIT behind to exhaust the ephemeral ports of later tests."""
    hello = client_hello(bytes(32))[:10]
    reset = struct.pack("ii", 1, 0)
    held, end, i = [], time.monotonic() + seconds, 0
    while time.monotonic() < end:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=1)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, reset)
            if partial and i % 2:
                s.send(hello)
            held.append(s)
        except OSError:
            pass
        i += 1
        if len(held) > 256:
            held.pop(0).close()
    for s in held:
        s.close()


class FrontDoorUnderFlood(unittest.TestCase):
    """Processes opening connections as fast as they can, half of them silent and half with a
    partial first frame, while a legitimate client checks in every 0.5 s: the silent and partial
    connections make room, never the client that sent a whole hello. FLOODERS (default 2 here,
    docs/security.md gives the 4-process figures) sets how many."""

    def test_a_client_checks_in_while_connections_flood_the_door(self):
        flooders = int(os.environ.get("FLOODERS", "2"))
        for keyed in (True, False):
            with tempfile.TemporaryDirectory() as d:
                env = dict(os.environ)
                if keyed:
                    env["SLUICE_AUTH_KEY_FILE"] = os.path.join(d, "key")
                    with open(env["SLUICE_AUTH_KEY_FILE"], "wb") as f:
                        f.write(SECRET + b"\n")
                    os.chmod(env["SLUICE_AUTH_KEY_FILE"], 0o600)
                else:
                    env.pop("SLUICE_AUTH_KEY_FILE", None)
                server, port = serve_blockstore(self, "127.0.0.1", env)
                procs = [multiprocessing.Process(target=flood_door, args=(port, 7, True)) for _ in range(flooders)]
                for p in procs:
                    p.start()
                time.sleep(1)
                checks = []
                end = time.monotonic() + 5
                while time.monotonic() < end:
                    t0 = time.monotonic()
                    r = subprocess.run([BLOCKSTORE, "check", "127.0.0.1:%d" % port, "1"], env=env,
                                       capture_output=True, text=True, timeout=60)
                    took = time.monotonic() - t0
                    checks.append((r.returncode == 0 and took <= 2.0, took, (r.stdout + r.stderr)[-300:]))
                    time.sleep(max(0.0, 0.5 - took))
                for p in procs:
                    p.join(30)
                good = sum(1 for ok, _, _ in checks if ok)
                slowest = max(t for _, t, _ in checks)
                print("%s, %d flooding processes: %d of %d checks succeeded within 2 s (slowest %.2f s)"
                      % ("with a key" if keyed else "without a key", flooders, good, len(checks), slowest))
                self.assertIsNone(server.poll(), "the server lives")
                server.terminate()
                _, err = server.communicate(timeout=10)
                self.assertIn("closed before its hello", err, "the flood took every place it could")
                self.assertGreaterEqual(good, 0.9 * len(checks), [c for c in checks if not c[0]][:3])


class FrontDoorPlaces(unittest.TestCase):
    """How the door's places in handshake are given and taken back, one server per test."""

    def serve(self, **env):
        self.server, self.port = serve_blockstore(self, "127.0.0.1", dict(os.environ, **env))

    def test_a_partial_first_frame_is_closed_after_a_second_a_whole_hello_is_not(self):
        # SLUICE_HANDSHAKE_TIMEOUT=10s: the partial hello is closed at the first-frame deadline,
        # the client that sent its whole hello keeps its place towards its proof.
        self.serve(SLUICE_HANDSHAKE_TIMEOUT="10s")
        partial = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        whole = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        t0 = time.monotonic()
        partial.sendall(client_hello(os.urandom(32))[:20])
        whole.sendall(client_hello(os.urandom(32)))
        self.assertEqual(recv_frame(whole)[0], SERVER_HELLO)
        self.assertTrue(closed(partial, timeout=5))
        gone = time.monotonic() - t0
        print("a partial hello was closed after %.2f s (SLUICE_HANDSHAKE_TIMEOUT=10s)" % gone)
        self.assertGreater(gone, 0.8)
        self.assertLess(gone, 3.0)
        time.sleep(1.0)
        whole.setblocking(False)
        with self.assertRaises(BlockingIOError, msg="the client past its hello is still served"):
            whole.recv(1)
        partial.close()
        whole.close()

    def test_a_source_that_floods_turns_over_its_own_places_not_anothers(self):
        # SLUICE_HANDSHAKE_MAX=8: one source holds at most 2 places before a hello. 127.0.0.3's two
        # partial hellos are opened first; 40 from 127.0.0.2 follow and close only their own.
        self.serve(SLUICE_HANDSHAKE_MAX="8")

        def partial_from(source):
            s = socket.create_connection(("127.0.0.1", self.port), timeout=5, source_address=(source, 0))
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.sendall(client_hello(os.urandom(32))[:20])
            return s

        other = [partial_from("127.0.0.3") for _ in range(2)]
        flood = [partial_from("127.0.0.2") for _ in range(40)]
        time.sleep(0.3)
        flood_open = [s for s in flood if not closed(s, timeout=0.01)]
        other_open = [s for s in other if not closed(s, timeout=0.01)]
        print("after 40 partial hellos from one source: %d of them open, %d of 2 from another source open"
              % (len(flood_open), len(other_open)))
        self.assertEqual(len(other_open), 2, "the other source kept its places")
        self.assertLessEqual(len(flood_open), 2, "the flooding source kept at most its share")
        for s in other + flood:
            s.close()
        self.assertIsNone(self.server.poll())

    def test_the_last_free_place_goes_to_a_slow_hello_when_nobody_else_waits(self):
        # Three of four places past their hello; the fourth connection sends its hello 300 ms
        # after its connect. With nobody else at the door, it keeps its place (the door once
        # closed the newest place as soon as it filled the last one).
        self.serve(SLUICE_HANDSHAKE_MAX="4", SLUICE_HANDSHAKE_TIMEOUT="5s")
        stalled = []
        for _ in range(3):
            s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            s.sendall(client_hello(os.urandom(32)))
            self.assertEqual(recv_frame(s)[0], SERVER_HELLO)
            stalled.append(s)
        slow = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        time.sleep(0.3)
        slow.sendall(client_hello(os.urandom(32)))
        frame = recv_frame(slow)
        self.assertIsNotNone(frame, "the slow hello's connection was closed")
        self.assertEqual(frame[0], SERVER_HELLO)
        for s in stalled + [slow]:
            s.close()
        self.assertIsNone(self.server.poll())

    def test_when_every_place_is_past_its_hello_new_clients_wait_and_none_is_closed(self):
        # Four places, taken by connections that sent a whole hello and then stall: a real client
        # waits in the listener's backlog until one expires at SLUICE_HANDSHAKE_TIMEOUT, then
        # gets in; no stalled connection was closed early to make room for it.
        self.serve(SLUICE_HANDSHAKE_MAX="4", SLUICE_HANDSHAKE_TIMEOUT="2s")
        stalled = []
        t0 = time.monotonic()
        for _ in range(4):
            s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            s.sendall(client_hello(os.urandom(32)))
            self.assertEqual(recv_frame(s)[0], SERVER_HELLO)
            stalled.append(s)
        r = subprocess.run([BLOCKSTORE, "check", "127.0.0.1:%d" % self.port, "1"], capture_output=True, text=True,
                           timeout=60)
        took = time.monotonic() - t0
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        ends = []
        for s in stalled:
            self.assertTrue(closed(s, timeout=5))
            ends.append(time.monotonic() - t0)
            s.close()
        print("4 stalled places: a client got in after %.2f s; the stalled ones were closed at %.2f-%.2f s"
              % (took, min(ends), max(ends)))
        self.assertGreater(took, 1.5, "it waited for a place")
        self.assertGreater(min(ends), 1.5, "no stalled connection was closed before its deadline")
        self.assertIsNone(self.server.poll())


class SharedPort(unittest.TestCase):
    def test_blockstore_serve_j4_listens_four_times_on_one_port_and_serves_every_client(self):
        # Four engines, each its own thread, one port (SO_REUSEPORT), one store: the process has
        # four listening sockets on the port, and 8 clients at once all write and read back.
        server, port = serve_blockstore(self, "127.0.0.1", dict(os.environ), args=("-j", "4"))
        ss = subprocess.run(["ss", "-Hltnp", "sport = :%d" % port], capture_output=True, text=True).stdout
        listening = [line for line in ss.splitlines() if "pid=%d," % server.pid in line]
        print("blockstore serve -j 4: %d listening sockets on port %d" % (len(listening), port))
        self.assertEqual(len(listening), 4, ss)
        clients = [subprocess.Popen([BLOCKSTORE, "check", "127.0.0.1:%d" % port, "22"], stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True) for _ in range(8)]
        for c in clients:
            out, _ = c.communicate(timeout=120)
            self.assertEqual(c.returncode, 0, out[-2000:])
            self.assertIn("0 mismatches, 0 errors", out)
        self.assertIsNone(server.poll())

    def test_each_listening_socket_of_a_shared_port_refuses_the_door_attacks_and_a_client_listens_nowhere(self):
        # ss -ltnp: the four sockets of `serve -j 4`, all on the door's port, and nothing else;
        # a connected client process has no listening socket. The kernel gives each connection to
        # one of the four by its source port: 32 connections per attack reach every engine but with
        # odds of 4 x (3/4)^32 = 4e-4. Each attack is answered with REFUSE (INVALID_ARGUMENT) or
        # closed, a partial hello is closed at the first-frame deadline, and the server serves on.
        server, port = serve_blockstore(self, "127.0.0.1", dict(os.environ), args=("-j", "4"))
        listening = [line.split()[3] for line in subprocess.run(["ss", "-Hltnp"], capture_output=True,
                                                                 text=True).stdout.splitlines()
                     if "pid=%d," % server.pid in line]
        print("blockstore serve -j 4 listens on: %s" % listening)
        self.assertEqual(listening, ["127.0.0.1:%d" % port] * 4)
        client = subprocess.Popen([BLOCKSTORE, "check", "127.0.0.1:%d" % port, "400"], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        self.addCleanup(lambda: client.poll() is None and (client.kill(), client.wait()))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and "pid=%d," % client.pid not in subprocess.run(
                ["ss", "-Htnp", "state", "established", "dst", "127.0.0.1:%d" % port], capture_output=True,
                text=True).stdout:
            time.sleep(0.05)
        self.assertIsNone(client.poll(), "the client is connected")
        client_listens = [line for line in subprocess.run(["ss", "-Hltnp"], capture_output=True,
                                                          text=True).stdout.splitlines()
                          if "pid=%d," % client.pid in line]
        self.assertEqual(client_listens, [], "a client listens nowhere")
        attacks = {"HTTP": b"GET / HTTP/1.0\r\n\r\n",
                   "a CLIENT_PROOF first": frame(CLIENT_PROOF, bytes(49)),
                   "a SERVER_HELLO from a client": frame(SERVER_HELLO, bytes(72)),
                   "a hello of 2^32 - 1 bytes": frame(CLIENT_HELLO, b"", length=0xffffffff),
                   "version 255": client_hello(bytes(32))[:5] + b"\xff" + client_hello(bytes(32))[6:]}
        for name, data in attacks.items():
            for _ in range(32):
                with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                    s.sendall(data)
                    answer = recv_frame(s, timeout=5)
                    self.assertEqual(refusal(answer)[0], 3, name)
        partial = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(32)]
        for s in partial:
            s.sendall(client_hello(bytes(32))[:20])
        for s in partial:
            self.assertTrue(closed(s, timeout=5), "a partial hello is closed")
            s.close()
        self.assertEqual(client.wait(timeout=120), 0, "the connected client's check succeeded meanwhile")
        r = subprocess.run([BLOCKSTORE, "check", "127.0.0.1:%d" % port, "4"], capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        self.assertIsNone(server.poll())


class ServerRestart(unittest.TestCase):
    def test_a_killed_server_restarted_on_its_address_serves_the_clients_again(self):
        # SIGKILL mid-traffic, a new server on the same port at once: it can listen (SO_REUSEADDR),
        # the client's calls in flight each fail once with Unavailable, it reconnects and succeeds,
        # and the new server knows nothing of what the old one was sent (door_client.cpp).
        server, port = serve_blockstore(self, "127.0.0.1", os.environ)
        client = subprocess.Popen([DOOR_CLIENT, "127.0.0.1:%d" % port, "20"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: client.poll() is None and client.kill())
        # Connected first (its front-door connection is established), then a moment of traffic:
        # on a loaded machine the client may take longer than that moment to start, and would
        # then meet only the new server.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "pid=%d," % client.pid not in subprocess.run(
                ["ss", "-Htnp", "state", "established", "dst", "127.0.0.1:%d" % port], capture_output=True,
                text=True).stdout:
            time.sleep(0.05)
        time.sleep(1.0)
        server.kill()
        server.wait()
        again = subprocess.Popen([BLOCKSTORE, "serve", "127.0.0.1:%d" % port], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: again.poll() is None and (again.kill(), again.communicate()))
        line = again.stdout.readline()
        self.assertIn("serving on port %d" % port, line, again.stderr.read() if not line else line)
        out, err = client.communicate(timeout=60)
        print(out.strip())
        self.assertEqual(client.returncode, 0, out + err)
        r = dict(kv.split("=") for kv in re.search(r"result (.*)", out).group(1).split())
        self.assertEqual(r["connects"], "2")
        self.assertGreater(int(r["unavailable"]), 0, "calls in flight failed with Unavailable")
        self.assertEqual(r["twice"], "0")
        self.assertEqual(r["old_block"], "NOT_FOUND", "nothing of the old incarnation reached the new one")
        self.assertEqual(r["new_block"], "ok")
        self.assertRegex(err, r"server 127\.0\.0\.1:%d" % port, "the client names the server by its address")


class SheddingListener:
    """A listener on loopback that closes its first `shed` connections at once, unread (as a door
    under a flood closes one whose hello has not come yet), and joins each later one to `to`
    (host, port), byte for byte both ways; None closes them all."""

    def __init__(self, shed, to):
        self.shed, self.to, self.accepted, self.times = shed, to, 0, []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            self.times.append(time.monotonic())
            if self.to is None or self.accepted <= self.shed:
                c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                c.close()
                continue
            s = socket.create_connection(self.to)
            for a, b in ((c, s), (s, c)):
                threading.Thread(target=self.pump, args=(a, b), daemon=True).start()

    @staticmethod
    def pump(a, b):
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        for x in (a, b):
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self):
        self.sock.close()


class ClientRedial(unittest.TestCase):
    """A client whose connection is closed before the server's hello dials again (the door closes
    connections without a hello under a flood), a bounded number of times within its deadline,
    after pauses that grow."""

    def test_a_connection_closed_before_the_servers_hello_is_dialed_again(self):
        server, port = serve_blockstore(self, "127.0.0.1", os.environ)
        door = SheddingListener(3, ("127.0.0.1", port))
        self.addCleanup(door.close)
        r = subprocess.run([BLOCKSTORE, "check", "127.0.0.1:%d" % door.port, "1"], capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        self.assertEqual(door.accepted, 4, "three shed, the fourth served")
        self.assertIsNone(server.poll())

    def test_a_server_that_always_closes_fails_the_client_after_eight_more_dials(self):
        door = SheddingListener(0, None)
        self.addCleanup(door.close)
        t0 = time.monotonic()
        r = subprocess.run([BLOCKSTORE, "check", "127.0.0.1:%d" % door.port, "1"], capture_output=True, text=True,
                           timeout=60)
        took = time.monotonic() - t0
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("during the handshake (9 dials, each closed before its hello)", r.stderr)
        self.assertEqual(door.accepted, 9, "the first dial and eight more")
        self.assertLess(took, 10.0, "no wait for the connect timeout")
        # Each redial after a pause that doubles from 2 ms (half to one and a half of it): at
        # least 1 + 2 + ... + 128 = 255 ms from the first dial to the last, so that clients a
        # flooded door shed together come back spread out.
        gaps = [round((b - a) * 1000, 1) for a, b in zip(door.times, door.times[1:])]
        print("ms between dials: %s" % gaps)
        self.assertGreaterEqual(door.times[-1] - door.times[0], 0.255, gaps)
        self.assertGreater(gaps[-1], gaps[0], "the pauses grow")

    def test_a_server_that_accepts_and_says_nothing_fails_the_client_at_its_timeout_naming_the_door(self):
        silent = socket.create_server(("127.0.0.1", 0))  # the kernel accepts; nobody answers
        self.addCleanup(silent.close)
        env = dict(os.environ, SLUICE_CONNECT_TIMEOUT="1s")
        t0 = time.monotonic()
        r = subprocess.run([BLOCKSTORE, "check", "127.0.0.1:%d" % silent.getsockname()[1], "1"], env=env,
                           capture_output=True, text=True, timeout=60)
        took = time.monotonic() - t0
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("no handshake with 127.0.0.1:%d within SLUICE_CONNECT_TIMEOUT=1s: its front door sent no hello"
                      % silent.getsockname()[1], r.stderr)
        self.assertGreaterEqual(took, 1.0)
        self.assertLess(took, 5.0)


class ManyClientsAtOnce(unittest.TestCase):
    def test_256_client_processes_connecting_at_once_all_connect_and_call(self):
        server, port = serve_blockstore(self, "127.0.0.1", os.environ)
        t0 = time.monotonic()
        clients = [subprocess.Popen([BLOCKSTORE, "check", "127.0.0.1:%d" % port, "1"], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, text=True) for _ in range(256)]
        failed = []
        for c in clients:
            _, err = c.communicate(timeout=300)
            if c.returncode != 0:
                failed.append(err.strip().splitlines()[-1:] or ["exit %d" % c.returncode])
        print("256 clients connected and called in %.1f s; %d failed" % (time.monotonic() - t0, len(failed)))
        self.assertEqual(failed, [], "every client connected and called")
        self.assertIsNone(server.poll())


if __name__ == "__main__":
    unittest.main(verbosity=2)
