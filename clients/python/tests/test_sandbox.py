import datetime
import io
import json
import os
import threading
import time
import urllib.error
import urllib.request

import pytest

from cordon._http import Transport
from cordon import (
    ALL_TRAFFIC,
    CommandExitException,
    FilesystemEventType,
    FileType,
    InvalidArgumentException,
    NotEnoughSpaceException,
    NotFoundException,
    PtySize,
    Sandbox,
    SandboxException,
    SandboxMetrics,
    SandboxQuery,
    SandboxState,
    TimeoutException,
    WriteEntry,
)


def test_commands_files_and_kill():
    with Sandbox(timeout=120, metadata={"suite": "python"}) as sbx:
        assert sbx.sandbox_id.startswith("sbx_")
        r = sbx.commands.run("echo hello; echo oops >&2; id -u")
        assert (r.stdout, r.stderr, r.exit_code) == ("hello\n1000\n", "oops\n", 0)

        seen = []
        r = sbx.commands.run("for i in 1 2 3; do echo $i; done", on_stdout=seen.append)
        assert "".join(seen) == "1\n2\n3\n" and r.stdout == "1\n2\n3\n"
        sbx.files.make_dir("sub")
        assert sbx.commands.run("echo $A; pwd", envs={"A": "x"}, cwd="sub").stdout == "x\n/workspace/sub\n"
        assert sbx.commands.run("cat", stdin="piped in").stdout == "piped in"

        with pytest.raises(CommandExitException) as e:
            sbx.commands.run("echo partial; exit 3")
        assert e.value.exit_code == 3 and e.value.stdout == "partial\n"

        start = time.time()
        with pytest.raises(TimeoutException):
            sbx.commands.run("sleep 30", timeout=0.3)
        assert time.time() - start < 20
        # No limit asked for is the sandbox's ceiling (without timeoutMs the
        # daemon's default of 5 minutes would hold instead).
        ceiling = Sandbox.connect(Transport(None, None).call("POST", "/v1/sandboxes", body={"maxTimeoutMs": 1500, "ttlSeconds": 120})["id"])
        try:
            assert ceiling.commands.run("sleep 0.2; echo done", timeout=0).stdout == "done\n"
            with pytest.raises(TimeoutException, match=r"\(1\.5s\)"):
                ceiling.commands.run("sleep 30", timeout=None)
        finally:
            ceiling.kill()

        info = sbx.files.write("dir/a.txt", "text ✓\n")
        assert info.name == "a.txt"
        assert sbx.files.read("dir/a.txt") == "text ✓\n"
        sbx.files.write("dir/b.bin", b"\x00\xff\x01")
        infos = sbx.files.write([WriteEntry("many/one.txt", "1"), {"path": "many/two.bin", "data": b"2"}])
        assert [i.name for i in infos] == ["one.txt", "two.bin"] and sbx.files.read("many/two.bin") == "2"
        assert sbx.files.read("dir/b.bin", format="bytes") == b"\x00\xff\x01"
        assert b"".join(sbx.files.read("dir/b.bin", format="stream")) == b"\x00\xff\x01"
        names = sorted((e.name, e.type) for e in sbx.files.list("dir"))
        assert names == [("a.txt", FileType.FILE), ("b.bin", FileType.FILE)]
        assert sbx.files.exists("dir/a.txt") and not sbx.files.exists("dir/none")
        assert sbx.files.make_dir("dir/sub") is True
        moved = sbx.files.rename("dir/b.bin", "dir/sub/c.bin")
        assert moved.name == "c.bin" and moved.path.endswith("/dir/sub/c.bin") and moved.size == 3
        assert not sbx.files.exists("dir/b.bin")
        sbx.files.rename("dir/sub/c.bin", "dir/b.bin")
        with pytest.raises(NotFoundException):
            sbx.files.rename("dir/none", "dir/x")
        sbx.files.remove("dir/a.txt")
        assert not sbx.files.exists("dir/a.txt")
        with pytest.raises(NotFoundException):
            sbx.files.read("dir/none")

        # A new end, counted from now: later, then sooner.
        first = sbx.get_info().end_at
        sbx.set_timeout(7200)
        later = sbx.get_info().end_at
        assert later and first and later > first
        sbx.set_timeout(60)
        assert sbx.get_info().end_at < first
        with pytest.raises(InvalidArgumentException):
            sbx.set_timeout(-1)

        again = Sandbox.connect(sbx.sandbox_id)
        assert again.files.read("dir/b.bin", format="bytes") == b"\x00\xff\x01"
        assert any(s.sandbox_id == sbx.sandbox_id and s.metadata == {"suite": "python"} for s in Sandbox.list())
        assert sbx.is_running()
    assert not sbx.is_running()
    assert sbx.kill() is False

    # By id, on the class, as E2B's are.
    other = Sandbox()
    assert Sandbox.get_info(other.sandbox_id).state == "running"
    Sandbox.set_timeout(other.sandbox_id, 7200)
    assert Sandbox.get_info(other.sandbox_id).end_at > other.get_info().started_at
    assert Sandbox.kill(other.sandbox_id) is True
    assert Sandbox.kill(other.sandbox_id) is False


def test_background_commands_and_ports():
    with Sandbox() as sbx:
        h = sbx.commands.run("echo starting; exec python3 -u -m http.server 8000 --bind 127.0.0.1", background=True)
        assert h.pid
        sbx.files.write("index.html", "served")
        url = sbx.get_host(8000)
        deadline = time.time() + 20
        while True:
            try:
                with urllib.request.urlopen(url + "index.html", timeout=5) as resp:
                    assert resp.read() == b"served"
                break
            except Exception:
                if time.time() > deadline:
                    raise
                time.sleep(0.1)
        assert any(c["id"] == h.id for c in sbx.commands.list())
        assert h.kill()
        with pytest.raises(CommandExitException) as e:
            h.wait()
        assert e.value.stdout.startswith("starting\n") and e.value.result.signal == "SIGKILL"

        out = []
        done = sbx.commands.run("echo one; sleep 0.2; echo two", background=True).wait(on_stdout=out.append)
        assert done.exit_code == 0 and "".join(out) == "one\ntwo\n"

        # Callbacks given at the start get a background command's output
        # as it comes; wait() ends with them.
        seen = []
        h = sbx.commands.run("echo a; sleep 0.3; echo b >&2", background=True, on_stdout=seen.append, on_stderr=lambda e: seen.append("err:" + e))
        deadline = time.time() + 20
        while "a\n" not in seen:
            assert time.time() < deadline, seen
            time.sleep(0.02)
        assert h.wait().stdout == "a\n" and seen == ["a\n", "err:b\n"]

        # A background command's own standard input, written piece by
        # piece and then ended, as E2B's send_stdin; or given whole.
        reader = sbx.commands.run("while read l; do echo got:$l; done; echo end", background=True, stdin=True)
        sbx.commands.send_stdin(reader.pid, "one\ntw")
        sbx.commands.send_stdin(reader.pid, b"o\n")
        sbx.commands.close_stdin(reader.pid)
        assert reader.wait().stdout == "got:one\ngot:two\nend\n"
        # disconnect, as E2B's: the callbacks get nothing more, the
        # command runs on, and wait() reads its output from the start.
        ticks = []
        ticker = sbx.commands.run("for i in $(seq 20); do echo $i; sleep 0.1; done", background=True, on_stdout=ticks.append)
        deadline = time.time() + 20
        while not ticks:
            assert time.time() < deadline
            time.sleep(0.02)
        ticker.disconnect()
        n = len(ticks)
        time.sleep(0.5)
        assert len(ticks) == n, ticks
        assert ticker.wait().stdout.split() == [str(i) for i in range(1, 21)]
        # By the handle, as E2B's: its input, and its output iterated.
        echo = sbx.commands.run("while read l; do echo got:$l; echo err:$l >&2; done; exit 3", background=True, stdin=True)
        echo.send_stdin("a\n")
        echo.close_stdin("b\n")
        events = list(echo)
        assert "".join(o for o, _, _ in events if o) == "got:a\ngot:b\n" and "".join(e for _, e, _ in events if e) == "err:a\nerr:b\n", events
        assert all(p is None for _, _, p in events)
        with pytest.raises(CommandExitException) as ended:
            echo.wait()
        assert ended.value.exit_code == 3 and ended.value.stdout == "got:a\ngot:b\n"
        assert sbx.commands.run("wc -c", background=True, stdin=b"\x00\xff\n").wait().stdout.strip() == "3"
        assert sbx.commands.run("wc -c", stdin=b"\x00\xff\n").stdout.strip() == "3"
        with pytest.raises(SandboxException):
            sbx.commands.send_stdin(sbx.commands.run("sleep 30", background=True).pid, "x")

        # A character whose bytes come in two chunks of output is one
        # character, on both streams.
        split = ("python3 -c \"import sys, time\n"
                 "for f in (sys.stdout, sys.stderr):\n"
                 "    b = 'é✓'.encode(); f.buffer.write(b[:1]); f.flush(); time.sleep(0.3); f.buffer.write(b[1:4]); f.flush(); time.sleep(0.3); f.buffer.write(b[4:] + bytes([255]) + b'\\n'); f.flush()\"")
        seen = []
        done = sbx.commands.run(split, background=True).wait(on_stdout=seen.append)
        assert done.stdout == "é✓\ufffd\n" and done.stderr == "é✓\ufffd\n" and "".join(seen) == done.stdout
        assert sbx.commands.run(split).stdout == "é✓\ufffd\n"
        sbx.files.write("latin1.txt", "café".encode("latin-1"))
        assert sbx.files.read("latin1.txt") == "caf\ufffd"


def test_background_timeouts():
    with Sandbox() as sbx:
        # No timeout given: a background command outlives the foreground's
        # default of 60 seconds (E2B's stops it), here checked as running
        # with no timeout at all.
        free = sbx.commands.run("sleep 600", background=True)
        listed = [c for c in sbx.commands.list() if c.pid == free.pid]
        assert listed[0].get("timeoutMs") is None and listed[0].tag == free.id and listed[0].cmd == "/bin/sh" and listed[0].args[-1] == "sleep 600", listed
        # Given one, it is ended then, what it left running included, and
        # wait() raises TimeoutException.
        h = sbx.commands.run("sleep 300 & wait", background=True, timeout=1)
        with pytest.raises(TimeoutException):
            h.wait()
        assert sbx.commands.run("pgrep -x sleep | wc -l").stdout.strip() == "1"
        # A terminal, likewise.
        term = sbx.pty.create(PtySize(rows=10, cols=40), cmd="sleep 600", timeout=0.5)
        with pytest.raises(TimeoutException):
            term.wait()
        assert sbx.commands.connect(free.pid).kill() is True


def test_pause_and_connect():
    with Sandbox(timeout=60) as sbx:
        h = sbx.commands.run("sleep 600", background=True)
        first_end = sbx.get_info().end_at
        assert sbx.pause() is True
        # Paused: not running, listed as paused, its work refused; a
        # second pause says it was paused already.
        assert sbx.is_running() is False
        assert any(s.sandbox_id == sbx.sandbox_id for s in Sandbox.list(query=SandboxQuery(state=[SandboxState.PAUSED])))
        with pytest.raises(SandboxException):
            sbx.commands.run("true")
        assert Sandbox.pause(sbx.sandbox_id) is False
        assert sbx.beta_pause() is False
        # connect thaws it, with its processes as they were, and moves
        # its end later (never sooner).
        again = Sandbox.connect(sbx.sandbox_id, timeout=600)
        assert again.is_running() is True
        assert [c["state"] for c in again.commands.list() if c["pid"] == h.pid] == ["running"]
        later = again.get_info().end_at
        assert later > first_end
        Sandbox.connect(sbx.sandbox_id, timeout=1)
        assert again.get_info().end_at == later
        # keep_memory=False is a stop, which only a persistent sandbox has:
        # refused here, not taken for a pause.
        with pytest.raises(SandboxException):
            sbx.pause(keep_memory=False)
        assert sbx.is_running() is True
    with pytest.raises(NotFoundException):
        Sandbox.connect(sbx.sandbox_id)


def test_watch():
    with Sandbox() as sbx:
        sbx.files.make_dir("w")
        handle = sbx.files.watch_dir("w")
        sbx.files.write("w/new.txt", "x")
        deadline = time.time() + 10
        events = []
        while not any(e.name == "new.txt" and e.type in (FilesystemEventType.CREATE, FilesystemEventType.WRITE, FilesystemEventType.RENAME) for e in events):
            events += handle.get_new_events()
            assert time.time() < deadline, events
            time.sleep(0.05)
        handle.stop()


def test_refusals():
    with pytest.raises(InvalidArgumentException):
        Sandbox(timeout=-1)
    with pytest.raises(SandboxException):
        Sandbox(tier="no-such-tier")
    with pytest.raises(NotFoundException):
        Sandbox.connect("sbx_0000000000000000")
    with pytest.raises(SandboxException):
        Sandbox(host="ftp://nowhere")
    with Sandbox() as sbx:
        with pytest.raises(SandboxException):
            sbx.commands.run("true", user="root")
    # A full writable space is its own error, and the file is kept.
    with Sandbox(disk_mb=2) as sbx:
        sbx.files.write("kept", "old")
        with pytest.raises(NotEnoughSpaceException) as e:
            sbx.files.write("kept", b"x" * (3 << 20))
        assert e.value.status == 507 and "writable space is full" in str(e.value)
        assert sbx.files.read("kept") == "old"


def test_attacker_cannot_reach_out():
    """A sandbox made without allow has no network; the client says so as the
    command's own failure."""
    with Sandbox() as sbx:
        with pytest.raises(CommandExitException) as e:
            sbx.commands.run("python3 -c \"import urllib.request; urllib.request.urlopen('http://198.51.100.7/', timeout=5)\"")
        assert "403" in e.value.stderr or "refused" in e.value.stderr.lower()


def test_allow_internet_access():
    """E2B's allow_internet_access=True is any public address; the cloud's
    metadata service, the host's loopback and private ranges stay refused."""
    with Sandbox(allow_internet_access=True) as sbx:
        assert Transport(None, None).call("GET", "/v1/sandboxes/" + sbx.sandbox_id)["spec"]["egress"]["mode"] == "allow-all"
        with pytest.raises(CommandExitException) as e:
            sbx.commands.run("python3 -c \"import urllib.request; urllib.request.urlopen('http://169.254.169.254/', timeout=5)\"")
        assert "403" in e.value.stderr
    with pytest.raises(SandboxException):
        Sandbox(allow=["a.test"], allow_internet_access=True)


def test_network():
    """E2B's network options: all traffic denied but allow_out's, through
    the real egress proxy (to a server of this test on the host's
    loopback, which only an address rule reaches); nothing denied is any
    public address; what an allowlist cannot enforce is refused."""
    import http.server

    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"hello from the host")

        def log_message(self, *args):
            pass

    srv = http.server.HTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    port = srv.server_address[1]
    # Through the proxy by its variable (the sandbox's own loopback is not
    # proxied), to an absolute URL.
    fetch = ("python3 -c \"import http.client, os, sys; p = os.environ['HTTP_PROXY'].rsplit(':', 1); "
             "c = http.client.HTTPConnection(p[0].split('//')[1], int(p[1]), timeout=10); c.request('GET', sys.argv[1]); "
             "r = c.getresponse(); print(r.status, r.read().decode())\" ")
    try:
        with Sandbox(network={"deny_out": [ALL_TRAFFIC], "allow_out": ["127.0.0.1:%d" % port]}) as sbx:
            assert sbx.commands.run(fetch + "http://127.0.0.1:%d/" % port).stdout == "200 hello from the host\n"
            assert sbx.commands.run(fetch + "http://198.51.100.7/").stdout.startswith("403")
        with Sandbox(network={"deny_out": [ALL_TRAFFIC]}) as sbx:
            assert sbx.commands.run(fetch + "http://127.0.0.1:%d/" % port).stdout.startswith("403")
            # Changed live, as E2B's update_network; on the class too.
            sbx.update_network({"deny_out": [ALL_TRAFFIC], "allow_out": ["127.0.0.1:%d" % port]})
            assert sbx.commands.run(fetch + "http://127.0.0.1:%d/" % port).stdout == "200 hello from the host\n"
            Sandbox.update_network(sbx.sandbox_id, {"deny_out": [ALL_TRAFFIC]})
            assert sbx.commands.run(fetch + "http://127.0.0.1:%d/" % port).stdout.startswith("403")
            with pytest.raises(InvalidArgumentException):
                sbx.update_network({"deny_out": ["10.0.0.0/8"]})
        with Sandbox(network={}) as sbx:
            assert Transport(None, None).call("GET", "/v1/sandboxes/" + sbx.sandbox_id)["spec"]["egress"]["mode"] == "allow-all"
            assert sbx.commands.run(fetch + "http://127.0.0.1:%d/" % port).stdout.startswith("403")
    finally:
        srv.shutdown()
    for bad in ({"deny_out": ["10.0.0.0/8"]}, {"allow_out": ["a.test"]}, {"deny_out": [ALL_TRAFFIC], "rules": {}}):
        with pytest.raises(InvalidArgumentException):
            Sandbox(network=bad)
    with pytest.raises(InvalidArgumentException):
        Sandbox(network={"deny_out": [ALL_TRAFFIC]}, allow=["a.test"])


def test_write_file_objects(tmp_path):
    """files.write takes what E2B's does: a file object, binary or text,
    streamed as it is read (never held whole); anything else is refused,
    not written as its repr. A file object that fails midway raises its
    own error and leaves the file as it was."""
    big = bytes(i % 251 for i in range(3 << 20))
    (tmp_path / "big.bin").write_bytes(big)
    (tmp_path / "t.txt").write_text("text ✓")
    with Sandbox() as sbx:
        with open(tmp_path / "big.bin", "rb") as f:
            info = sbx.files.write("up/big.bin", f)
        assert info.name == "big.bin" and info.path.startswith("/") and info.path.endswith("/up/big.bin"), info
        assert sbx.files.read("up/big.bin", format="bytes") == big
        with open(tmp_path / "t.txt", encoding="utf-8") as f:
            sbx.files.write("up/t.txt", f)
        assert sbx.files.read("up/t.txt") == "text ✓"

        class Broken(io.RawIOBase):
            def __init__(self):
                self.n = 0

            def read(self, size=-1):
                self.n += 1
                if self.n > 2:
                    raise OSError(5, "the source broke")
                return b"x" * 1000

        with pytest.raises(SandboxException) as e:
            sbx.files.write("up/t.txt", Broken())
        assert "the source broke" in str(e.value)
        assert sbx.files.read("up/t.txt") == "text ✓"
        for bad in (5, {"some": "dict"}, object()):
            with pytest.raises(InvalidArgumentException):
                sbx.files.write("up/bad", bad)
        assert not sbx.files.exists("up/bad")


def test_file_urls():
    """E2B's download_url and upload_url: a URL of the daemon that reads
    or writes one file with no key (as a browser would use it)."""
    with Sandbox() as sbx:
        sbx.files.write("out/chart.svg", "<svg/>")
        url = sbx.download_url("out/chart.svg", use_signature_expiration=60)
        with urllib.request.urlopen(url) as r:
            assert r.read() == b"<svg/>"
        up = sbx.upload_url("in/data.bin")
        urllib.request.urlopen(urllib.request.Request(up, data=b"\x00\x01", method="PUT")).close()
        assert sbx.files.read("in/data.bin", format="bytes") == b"\x00\x01"
        # As a browser's form (or requests' files=) posts it.
        form = (b"--b0undary\r\nContent-Disposition: form-data; name=\"file\"; filename=\"x.bin\"\r\n"
                b"Content-Type: application/octet-stream\r\n\r\nform\xffbytes\r\n--b0undary--\r\n")
        req = urllib.request.Request(up, data=form, method="POST", headers={"Content-Type": "multipart/form-data; boundary=b0undary"})
        with urllib.request.urlopen(req) as r:
            assert json.loads(r.read())[0]["name"] == "data.bin"
        assert sbx.files.read("in/data.bin", format="bytes") == b"form\xffbytes"
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(urllib.request.Request(url, data=b"x", method="PUT"))
        assert e.value.code == 404
        with pytest.raises(InvalidArgumentException):
            sbx.upload_url()
        with pytest.raises(InvalidArgumentException):
            sbx.download_url("out/chart.svg", use_signature_expiration=86401)
        with pytest.raises(SandboxException):
            sbx.download_url("out/chart.svg", user="root")


def test_snapshot_and_fork():
    with Sandbox() as sbx:
        sbx.files.write("state.txt", "v1")
        snap = sbx.snapshot()
        assert snap.snapshot_id.startswith("snap_") and snap.source == sbx.sandbox_id and snap.files >= 1
        sbx.files.write("state.txt", "v2")
        with Sandbox(snapshot=snap.snapshot_id) as restored:
            assert restored.files.read("state.txt") == "v1"
        forks = sbx.fork(2)
        try:
            assert len(forks) == 2 and len({f.sandbox_id for f in forks} | {sbx.sandbox_id}) == 3
            forks[0].files.write("state.txt", "mine")
            assert forks[1].files.read("state.txt") == "v2" and sbx.files.read("state.txt") == "v2"
        finally:
            for f in forks:
                f.kill()
        assert any(s.snapshot_id == snap.snapshot_id for s in Sandbox.list_snapshots())
        # By E2B's names: create_snapshot (a name refused: cordon's have
        # none), and list_snapshots as a paginator.
        again = sbx.create_snapshot()
        with pytest.raises(InvalidArgumentException):
            sbx.create_snapshot(name="nightly")
        p, listed = Sandbox.list_snapshots(limit=1), []
        while p.has_next:
            listed += [s.snapshot_id for s in p.next_items()]
        assert {snap.snapshot_id, again.snapshot_id} <= set(listed)
        assert Sandbox.delete_snapshot(again.snapshot_id) is True
        assert Sandbox.delete_snapshot(snap.snapshot_id) is True
        assert Sandbox.delete_snapshot(snap.snapshot_id) is False
        with pytest.raises(NotFoundException):
            Sandbox(snapshot=snap.snapshot_id)


def test_persistent_stop_and_start():
    with Sandbox(persistent=True, disk_mb=64) as sbx:
        sbx.files.write("kept.txt", "v1")
        boot = sbx.get_info().boot_id
        assert boot
        sbx.stop()
        assert sbx.get_info().state == "suspended"
        sbx.start()
        info = sbx.get_info()
        assert info.state == "running" and info.boot_id and info.boot_id != boot
        assert sbx.files.read("kept.txt") == "v1"
        r = sbx.commands.run("dd if=/dev/zero of=big bs=1M count=100 2>&1 || true")
        assert "No space left" in r.stdout
        # E2B's pause without its memory is this stop; connect starts it.
        boot = sbx.get_info().boot_id
        assert sbx.pause(keep_memory=False) is True
        assert sbx.get_info().state == "suspended" and sbx.pause(keep_memory=False) is False
        Sandbox.connect(sbx.sandbox_id)
        info = sbx.get_info()
        assert info.state == "running" and info.boot_id != boot
        assert sbx.files.read("kept.txt") == "v1"


def test_pty():
    with Sandbox() as sbx:
        term = sbx.pty.create(PtySize(rows=24, cols=80))
        assert term.pid
        # What the terminal wrote, as it wrote it, on_pty's; typed input,
        # a size change the program sees, and the shell's exit status.
        seen, ended = [], []

        def follow():
            try:
                term.wait(on_pty=seen.append)
            except CommandExitException as e:
                ended.append(e.exit_code)

        reader = threading.Thread(target=follow)
        reader.start()

        def until(text):
            deadline = time.time() + 20
            while text not in b"".join(seen).decode(errors="replace"):
                assert time.time() < deadline, b"".join(seen)
                time.sleep(0.05)

        sbx.pty.send_stdin(term.pid, "stty size; echo $((6 * 7)); tty\n")
        until("/dev/pts/")
        sbx.pty.resize(term.pid, PtySize(rows=30, cols=100))
        sbx.pty.send_stdin(term.pid, b"stty size; exit 3\n")
        reader.join(30)
        out = b"".join(seen).decode()
        assert all(isinstance(b, bytes) for b in seen)
        assert "24 80" in out and "42" in out and "30 100" in out, out
        assert ended == [3]
        # A terminal's program is killed by its pid; after, there is none.
        other = sbx.pty.create(PtySize(rows=10, cols=10), cmd="sleep 600")
        assert sbx.pty.kill(other.pid) is True
        with pytest.raises(NotFoundException):
            sbx.pty.send_stdin(123456789, "x")


def test_get_metrics():
    """get_metrics, as E2B's: CPU, memory and the writable space a running
    sandbox uses, against its limits; on the class by id too."""
    with Sandbox(timeout=120, memory_mb=256) as sbx:
        sbx.commands.run("i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; head -c 8388608 /dev/zero > m.bin")
        sbx.commands.run("python3 -c \"import time; b = b'x' * (32 << 20); time.sleep(600)\"", background=True)
        for _ in range(100):
            m = sbx.get_metrics()[-1]
            if m.tasks >= 1 and m.mem_used >= 40 << 20:
                break
            time.sleep(0.1)
        assert isinstance(m, SandboxMetrics) and m.timestamp.tzinfo is not None, m
        assert m.cpu_count > 0 and 0 <= m.cpu_used_pct <= 100 and m.cpu_seconds >= 0.05, m
        assert 40 << 20 <= m.mem_used <= m.mem_total == 256 << 20, m
        assert 8 << 20 <= m.disk_used <= m.disk_total, m
        assert m.tasks >= 1 and m.oom_kills == 0, m
        again = Sandbox.get_metrics(sbx.sandbox_id)[-1]
        assert again.cpu_seconds >= m.cpu_seconds, (m, again)
        # Over time: the daemon's readings (every 200 ms here), oldest
        # first, then one taken now; a window that ends before now has no
        # reading of now, and one that starts at now only that.
        every = sbx.get_metrics()
        for _ in range(100):
            if len(every) >= 3:
                break
            time.sleep(0.1)
            every = sbx.get_metrics()
        assert len(every) >= 3 and all(a.timestamp < b.timestamp for a, b in zip(every, every[1:])), every
        cut = every[1].timestamp
        old = sbx.get_metrics(end=cut)
        assert old[0].timestamp == every[0].timestamp and all(x.timestamp <= cut + datetime.timedelta(seconds=1) for x in old), (old, every)
        assert len(Sandbox.get_metrics(sbx.sandbox_id, start=datetime.datetime.now() + datetime.timedelta(seconds=1))) == 1
    with pytest.raises(NotFoundException):
        Sandbox.get_metrics(sbx.sandbox_id)


def test_list_query():
    """Sandbox.list(query=SandboxQuery(...)), as E2B's: by metadata (every
    label given) and by state."""
    with Sandbox(timeout=120, metadata={"team": "a", "job": "1"}) as a, Sandbox(timeout=120, metadata={"team": "b"}) as b:
        ids = lambda q: {s.sandbox_id for s in Sandbox.list(query=q)} & {a.sandbox_id, b.sandbox_id}
        assert ids(SandboxQuery(metadata={"team": "a"})) == {a.sandbox_id}
        assert ids(SandboxQuery(metadata={"team": "a", "job": "2"})) == set()
        assert ids({"metadata": {"team": "b"}}) == {b.sandbox_id}
        assert ids(SandboxQuery(state=[SandboxState.RUNNING])) == {a.sandbox_id, b.sandbox_id}
        assert ids(SandboxQuery(state=["paused"])) == set()
        # E2B's v2 paginator over the same, a page at a time.
        pages, p = [], Sandbox.list(query=SandboxQuery(metadata={"team": "a"}), limit=1)
        while p.has_next:
            pages.append([s.sandbox_id for s in p.next_items()])
        assert pages == [[a.sandbox_id]], pages
        with pytest.raises(SandboxException):
            p.next_items()
        everything, p = [], Sandbox.list(limit=1)
        while p.has_next:
            everything += p.next_items()
        assert {a.sandbox_id, b.sandbox_id} <= {s.sandbox_id for s in everything}
        with pytest.raises(InvalidArgumentException):
            Sandbox.list(limit=0)
