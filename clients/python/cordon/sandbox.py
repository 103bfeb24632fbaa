"""Sandbox, commands and files: shaped as E2B's Python SDK, so that moving
an agent to cordon is a change of import and host."""

import base64
import codecs
import datetime
import enum
import json
import math
import queue
import re
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterator, List, Optional, Union

from ._http import Transport
from .errors import CommandExitException, InvalidArgumentException, NotFoundException, SandboxException, TimeoutException

DEFAULT_SANDBOX_TIMEOUT = 300  # seconds a sandbox lives unless told
class _DefaultTimeout(float):
    """The timeout a caller did not give: a foreground command's 60
    seconds, which a background one does not take."""


DEFAULT_COMMAND_TIMEOUT = _DefaultTimeout(60)  # seconds a foreground command runs unless told
DEFAULT_MAX_TIMEOUT_MS = 30 * 60 * 1000  # a sandbox's ceiling on its commands' timeouts unless its create set one


def _ms(seconds: float) -> int:
    """A timeout in seconds as whole milliseconds, at least one."""
    return max(1, int(seconds * 1000))


def _q(sid, rest=""):
    return "/v1/sandboxes/" + urllib.parse.quote(sid, safe="") + rest


class _either:
    """A method of a sandbox that may also be called on the class with the
    sandbox's id first (and api_key=, host=), as E2B's are:
    Sandbox.kill(sandbox_id) as well as sbx.kill()."""

    def __init__(self, fn):
        self._fn = fn
        self.__doc__ = fn.__doc__

    def __get__(self, obj, cls):
        if obj is not None:
            return self._fn.__get__(obj, cls)

        def on_id(sandbox_id: str, *args, api_key: Optional[str] = None, host: Optional[str] = None, **kwargs):
            return self._fn(cls(_sandbox_id=sandbox_id, _transport=Transport(host, api_key)), *args, **kwargs)

        on_id.__doc__ = self._fn.__doc__
        return on_id


@dataclass
class CommandResult:
    stdout: str
    stderr: str
    exit_code: int
    error: Optional[str] = None
    signal: Optional[str] = None


class ProcessInfo(dict):
    """A background command as commands.list gives it: the agent's session
    (p["id"], p["state"], ...), and E2B's ProcessInfo fields (p.pid, p.tag,
    p.cmd, p.args, p.cwd, p.envs)."""

    pid = property(lambda self: self.get("pid"))
    tag = property(lambda self: self.get("id"))
    cmd = property(lambda self: self.get("command"))
    args = property(lambda self: self.get("args") or [])
    # The agent does not say them back; E2B's may be empty too.
    cwd = property(lambda self: None)
    envs = property(lambda self: {})


class CommandHandle:
    """A command started with background=True: it runs in the sandbox on its
    own (a session) until it exits or is killed."""

    def __init__(self, sandbox, session):
        self._sb = sandbox
        self.id = session["id"]
        self.pid = session.get("pid")
        self._tty = bool(session.get("tty"))
        self._following = None  # the thread following its output, and what it got
        self._outcome = None  # once its output was read to the end: its result, or what to raise
        self._stopped = threading.Event()  # disconnect(): the callbacks get nothing more
        self._resp = None  # the output being followed

    def _path(self, rest=""):
        return _q(self._sb.sandbox_id, "/agent/sessions/" + urllib.parse.quote(self.id, safe="") + rest)

    def _follow(self, on_stdout=None, on_stderr=None):
        """Follows the output from now on, in a thread, to the callbacks
        (run(background=True, on_stdout=...)); wait() then ends with it."""
        got = {}

        def follow():
            try:
                got["result"] = self._wait(on_stdout, on_stderr, None)
            except Exception as e:  # wait() raises it, unless it was disconnected
                got["error"] = e

        t = threading.Thread(target=follow, daemon=True)
        self._following = (t, got)
        t.start()

    def __iter__(self):
        """Its output from the start as it comes, as E2B's handle iterates:
        (stdout, None, None) and (None, stderr, None) as text, or for a
        terminal (None, None, bytes). wait() then gives the result."""
        return self._events()

    def send_stdin(self, data: Union[str, bytes]) -> None:
        """Writes data to its standard input (started with stdin=True), or
        types it into its terminal."""
        self._sb.commands.send_stdin(self.id, data)

    def close_stdin(self, data: Union[str, bytes] = b"") -> None:
        """Writes data, then closes its standard input: it reads its end."""
        self._sb.commands.close_stdin(self.id, data)

    def wait(self, on_stdout: Optional[Callable[[str], None]] = None, on_stderr: Optional[Callable[[str], None]] = None,
             on_pty: Optional[Callable[[bytes], None]] = None) -> CommandResult:
        """Follows the output (from the start) until the command ends, and
        returns its result; a non-zero exit raises CommandExitException, an
        end at its timeout TimeoutException. A terminal's output (sbx.pty)
        goes to on_pty as the bytes it wrote. For a command started with
        callbacks, it waits for the thread that calls them."""
        if self._following:
            t, got = self._following
            t.join()
            if "error" in got:
                raise got["error"]
            return got["result"]
        return self._wait(on_stdout, on_stderr, on_pty)

    def _wait(self, on_stdout, on_stderr, on_pty) -> CommandResult:
        stopped = self._stopped
        if self._outcome is None:
            for out, err, pty in self._events(stopped):
                if stopped.is_set():
                    break
                if out is not None and on_stdout:
                    on_stdout(out)
                elif err is not None and on_stderr:
                    on_stderr(err)
                elif pty is not None and on_pty:
                    on_pty(pty)
        if self._outcome is None:
            raise SandboxException("disconnected from the command before it ended", code="disconnected")
        if isinstance(self._outcome, Exception):
            raise self._outcome
        return self._outcome

    def _events(self, stopped: Optional[threading.Event] = None):
        """The output's events, as __iter__ says; at its end, the outcome
        (unless stopped was set meanwhile: disconnect)."""
        out, err = [], []
        # The output comes in chunks of bytes, which may end inside a
        # character: each stream's decoder holds such a character's first
        # bytes until the rest arrives.
        decoders = {"stdout": codecs.getincrementaldecoder("utf-8")("replace"), "stderr": codecs.getincrementaldecoder("utf-8")("replace")}

        def take(stream, text):
            if not text:
                return None
            (err if stream == "stderr" else out).append(text)
            return (None, text, None) if stream == "stderr" else (text, None, None)

        resp = self._resp = self._sb._t.open("GET", self._path("/output"), query={"from": 0, "follow": 1})
        for ev in Transport.lines(resp):
            if ev.get("type") == "output":
                stream = "stderr" if ev.get("stream") == "stderr" else "stdout"
                data = base64.b64decode(ev.get("data", ""))
                text = decoders[stream].decode(data)
                if self._tty:
                    out.append(text)
                    if data:
                        yield None, None, data
                elif (event := take(stream, text)) is not None:
                    yield event
            elif ev.get("type") == "end" and ev.get("done"):
                break
        for stream, d in decoders.items():
            text = d.decode(b"", final=True)
            if self._tty:
                out.append(text)
            elif (event := take(stream, text)) is not None:
                yield event
        if stopped is not None and stopped.is_set():
            return
        # The output ends once every holder of its pipes closed them; the
        # program itself may end a little later.
        s = self._sb._t.call("GET", self._path("/wait"), query={"timeoutMs": 30000})
        while s.get("state") == "running":
            s = self._sb._t.call("GET", self._path("/wait"), query={"timeoutMs": 30000})
        code = s.get("exitCode")
        result = CommandResult("".join(out), "".join(err), code if code is not None else -1, signal=s.get("signal") or None)
        if s.get("timedOut"):
            result.error = "timed out"
            self._outcome = TimeoutException("the command ran past its timeout (%gs) and was ended" % (s.get("timeoutMs", 0) / 1000))
        elif result.exit_code != 0:
            result.error = "exit status %d" % result.exit_code
            self._outcome = CommandExitException(result)
        else:
            self._outcome = result

    def kill(self) -> bool:
        """Stops it (KILL) and returns once it is gone."""
        try:
            self._sb._t.call("POST", self._path("/kill"), body={"signal": "KILL"})
            return True
        except NotFoundException:
            return False

    def disconnect(self) -> None:
        """Stops following its output, as E2B's: the callbacks given to run
        get nothing more once it returns (one already called finishes).
        The command runs on; wait() or commands.connect(pid) reads its
        output again from the start."""
        self._stopped.set()
        resp = self._resp
        if resp is not None:
            try:
                resp._cordon_conn.sock.shutdown(2)  # the follower's read ends
            except (AttributeError, OSError):
                pass
        if self._following:
            self._following[0].join(10)
        self._following, self._resp = None, None
        self._stopped = threading.Event()


class Commands:
    def __init__(self, sandbox):
        self._sb = sandbox

    def run(
        self,
        cmd: str,
        background: bool = False,
        envs: Optional[Dict[str, str]] = None,
        user: Optional[str] = None,
        cwd: Optional[str] = None,
        on_stdout: Optional[Callable[[str], None]] = None,
        on_stderr: Optional[Callable[[str], None]] = None,
        stdin: Union[None, bool, str, bytes] = None,
        timeout: Optional[float] = DEFAULT_COMMAND_TIMEOUT,
        request_timeout: Optional[float] = None,
    ) -> Union[CommandResult, CommandHandle]:
        """Runs cmd with sh -c. In the foreground it returns the result once
        the command ends (raising CommandExitException on a non-zero exit and
        TimeoutException past timeout seconds; 0 or None: as long as the
        sandbox lets a command run, 30 minutes unless its create said
        otherwise), calling on_stdout and on_stderr with output as it comes;
        stdin, text or bytes, is its whole input. With background=True it
        returns a CommandHandle at once; stdin=True gives it a standard input
        of its own (send_stdin, close_stdin), text or bytes that and its
        end. A background command runs until it exits or is killed unless
        given a timeout: then its process group, what it left running
        included, is ended that many seconds after its start, and wait()
        raises TimeoutException. (E2B's ends it after 60 seconds unless told
        otherwise, which stops many a server; cordon's does not.)"""
        if user is not None:
            raise SandboxException("user: commands run as the sandbox's own user; cordon takes no other per command", code="unsupported")
        if background:
            body = {"command": "/bin/sh", "args": ["-c", cmd], "cwd": cwd or "", "env": envs or {}}
            if timeout and timeout is not DEFAULT_COMMAND_TIMEOUT:
                body["timeoutMs"] = _ms(timeout)
            if stdin is not None and stdin is not False:
                # stdin=True: a standard input of its own, for send_stdin;
                # text: that, then its end.
                body["stdin"] = True
            h = CommandHandle(self._sb, self._sb._t.call("POST", _q(self._sb.sandbox_id, "/agent/sessions"), body=body))
            if on_stdout or on_stderr:
                # Its output to the callbacks as it comes, as E2B's.
                h._follow(on_stdout, on_stderr)
            if isinstance(stdin, (str, bytes)):
                self.close_stdin(h.id, stdin)
            return h
        if stdin is True:
            raise SandboxException("stdin=True is for a background command, whose input send_stdin writes; give a foreground command its input as text", code="invalid_request")
        body = {"command": "/bin/sh", "args": ["-c", cmd]}
        if cwd:
            body["cwd"] = cwd
        if envs:
            body["env"] = envs
        if isinstance(stdin, str):
            body["stdin"] = stdin
        elif isinstance(stdin, bytes):
            body["stdin"], body["stdinEncoding"] = base64.b64encode(stdin).decode(), "base64"
        if timeout:
            body["timeoutMs"] = _ms(timeout)
        else:
            # No limit asked for: as long as the sandbox lets a command run
            # (without timeoutMs the daemon's default, 5 minutes, holds).
            body["timeoutMs"] = self._sb._ceiling_ms()
        resp = self._sb._t.open("POST", _q(self._sb.sandbox_id, "/exec"), body=body, timeout=request_timeout)
        out, err, result = [], [], None
        for ev in Transport.lines(resp):
            t = ev.get("type")
            if t == "stdout_delta":
                out.append(ev.get("data", ""))
                if on_stdout:
                    on_stdout(ev.get("data", ""))
            elif t == "stderr_delta":
                err.append(ev.get("data", ""))
                if on_stderr:
                    on_stderr(ev.get("data", ""))
            elif t == "result":
                result = ev
            elif t == "error":
                raise SandboxException("the command could not run: %s" % ev.get("error"), code="exec")
        if result is None:
            raise SandboxException("the command's stream ended without a result")
        res = CommandResult("".join(out), "".join(err), result.get("exitCode", -1), signal=result.get("signal") or None)
        if result.get("timedOut"):
            res.error = "timed out"
            raise TimeoutException("the command ran past its timeout (%gs) and was ended" % (body["timeoutMs"] / 1000))
        if res.exit_code != 0:
            res.error = "exit status %d" % res.exit_code
            raise CommandExitException(res)
        return res

    def send_stdin(self, pid: Union[int, str], data: Union[str, bytes]) -> None:
        """Writes data to the standard input of a background command started
        with stdin=True (or types it into a terminal), as E2B's."""
        self._input(pid, data, False)

    def close_stdin(self, pid: Union[int, str], data: Union[str, bytes] = b"") -> None:
        """Writes data, then closes the command's standard input: it reads
        its end."""
        self._input(pid, data, True)

    def _input(self, pid, data, end):
        if isinstance(data, str):
            data = data.encode()
        h = self.connect(pid)
        self._sb._t.call("POST", h._path("/input"), query={"end": 1} if end else None, body=data,
                         headers={"Content-Type": "application/octet-stream"})

    def list(self) -> List["ProcessInfo"]:
        """The background commands the sandbox holds (running or exited)."""
        return [ProcessInfo(p) for p in self._sb._t.call("GET", _q(self._sb.sandbox_id, "/agent/sessions")).get("sessions", [])]

    def kill(self, pid: Union[int, str]) -> bool:
        """Kills a background command by its pid (or its id)."""
        try:
            return self.connect(pid).kill()
        except NotFoundException:
            return False

    def connect(self, pid: Union[int, str]) -> CommandHandle:
        """The background command (or terminal) of that pid (or id)."""
        for s in self.list():
            if s.get("pid") == pid or s.get("id") == pid:
                return CommandHandle(self._sb, s)
        raise NotFoundException("no background command %r" % (pid,))


@dataclass
class PtySize:
    rows: int
    cols: int


class Pty:
    """Terminals in the sandbox, as E2B's sbx.pty: a shell on a terminal of
    its own, typed into and resized by its pid, its output the terminal's
    bytes (handle.wait(on_pty=...))."""

    def __init__(self, sandbox):
        self._sb = sandbox

    def create(self, size: PtySize = PtySize(24, 80), cwd: Optional[str] = None, envs: Optional[Dict[str, str]] = None,
               cmd: Optional[str] = None, timeout: Optional[float] = None) -> CommandHandle:
        """Starts bash (else sh), or cmd with sh -c, on a terminal of
        size rows by cols (1 to 4096 each) and returns its handle at once;
        with a timeout, in seconds, it is ended that long after (E2B's
        default of 60 seconds is not cordon's: a terminal lasts until its
        program exits or is killed)."""
        body = {"command": "/bin/sh", "args": ["-c", cmd or "command -v bash >/dev/null 2>&1 && exec bash -i || exec sh -i"],
                "tty": True, "rows": size.rows, "cols": size.cols, "cwd": cwd or "", "env": envs or {}}
        if timeout:
            body["timeoutMs"] = _ms(timeout)
        return CommandHandle(self._sb, self._sb._t.call("POST", _q(self._sb.sandbox_id, "/agent/sessions"), body=body))

    def send_stdin(self, pid: Union[int, str], data: Union[bytes, str]) -> None:
        """Types data into the terminal, as typed ("\\x03" is Ctrl-C); at
        most 1 MiB a call."""
        self._sb.commands.send_stdin(pid, data)

    def resize(self, pid: Union[int, str], size: PtySize) -> None:
        """Sets the terminal's size; the program is told (SIGWINCH)."""
        h = self._sb.commands.connect(pid)
        self._sb._t.call("POST", h._path("/resize"), body={"rows": size.rows, "cols": size.cols})

    def kill(self, pid: Union[int, str]) -> bool:
        """Stops the terminal's program (KILL); False if there is none."""
        return self._sb.commands.kill(pid)


class FileType(enum.Enum):
    FILE = "file"
    DIR = "dir"
    SYMLINK = "symlink"
    OTHER = "other"


@dataclass
class EntryInfo:
    name: str
    type: FileType
    path: str
    size: int = 0
    mode: int = 0
    modified_time_ms: int = 0
    symlink_target: Optional[str] = None


@dataclass
class WriteInfo:
    name: str
    path: str
    type: FileType = FileType.FILE


@dataclass
class WriteEntry:
    """One file of files.write([...]), as E2B's."""
    path: str
    data: Union[str, bytes]


class FilesystemEventType(enum.Enum):
    CREATE = "create"
    WRITE = "write"
    REMOVE = "remove"
    RENAME = "rename"
    OVERFLOW = "overflow"


@dataclass
class FilesystemEvent:
    name: str
    type: FilesystemEventType
    old_name: Optional[str] = None
    is_dir: bool = False


class WatchHandle:
    """A directory being watched: events queue up until read with
    get_new_events (or go to on_event as they come)."""

    def __init__(self, resp, on_event):
        self._resp = resp
        self._events = queue.Queue()
        self._on_event = on_event
        self._ready = threading.Event()
        self._stopped = False
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            self.stop()
            raise TimeoutException("the watch was not in place within 30 s")

    def _read(self):
        try:
            for ev in Transport.lines(self._resp):
                t = ev.get("type")
                if t == "ready":
                    self._ready.set()
                    continue
                try:
                    kind = FilesystemEventType(t)
                except ValueError:
                    continue
                fe = FilesystemEvent(ev.get("path", ""), kind, ev.get("from"), bool(ev.get("dir")))
                if self._on_event:
                    self._on_event(fe)
                else:
                    self._events.put(fe)
        except Exception:  # the stream closed: stopped, or the sandbox went
            pass
        finally:
            self._ready.set()

    def get_new_events(self) -> List[FilesystemEvent]:
        out = []
        while True:
            try:
                out.append(self._events.get_nowait())
            except queue.Empty:
                return out

    def stop(self):
        if not self._stopped:
            self._stopped = True
            try:
                self._resp._cordon_conn.sock.shutdown(2)
            except OSError:
                pass
            self._resp._cordon_conn.close()


def _entry(e, path) -> "EntryInfo":
    """An EntryInfo from the agent's description of one path."""
    return EntryInfo(e["name"], FileType(e.get("type", "other")), e.get("path", path), e.get("size", 0), e.get("mode", 0), e.get("mtimeMs", 0))


class Files:
    def __init__(self, sandbox):
        self._sb = sandbox

    def read(self, path: str, format: str = "text", request_timeout: Optional[float] = None) -> Union[str, bytes, Iterator[bytes]]:
        """The file's content: text (the default; what is not UTF-8 reads
        as U+FFFD, as E2B's does), bytes (format="bytes") or an iterator of
        chunks (format="stream")."""
        if format not in ("text", "bytes", "stream"):
            raise SandboxException("format %r: want text, bytes or stream" % format, code="invalid_request")
        resp = self._sb._t.open("GET", _q(self._sb.sandbox_id, "/files"), query={"path": path}, timeout=request_timeout)
        if format == "stream":
            def chunks():
                try:
                    while True:
                        b = resp.read(64 << 10)
                        if not b:
                            return
                        yield b
                finally:
                    resp._cordon_conn.close()
            return chunks()
        try:
            data = resp.read()
        finally:
            resp._cordon_conn.close()
        if format == "bytes":
            return data
        return data.decode("utf-8", "replace")

    def write(self, path, data=None, mode: Optional[int] = None, request_timeout: Optional[float] = None):
        """Writes a file (str, bytes, or a file object, binary or text, sent
        as it is read without being held whole), making its directories;
        or, given a list of WriteEntry (or {"path", "data"}), each of them.
        The WriteInfo says where the file is in the sandbox."""
        if isinstance(path, list):
            return [self.write(*((f["path"], f["data"]) if isinstance(f, dict) else (f.path, f.data)), mode=mode, request_timeout=request_timeout) for f in path]
        headers = None
        if data is None:
            body = b""
        elif isinstance(data, str):
            body = data.encode()
        elif isinstance(data, (bytes, bytearray, memoryview)):
            body = bytes(data)
        elif hasattr(data, "read"):
            # Chunked: the length is known only at the end.
            body = _chunks(data)
            headers = {"Content-Type": "application/octet-stream"}
        else:
            raise InvalidArgumentException("data: str, bytes or a file object, not %s" % type(data).__name__)
        query = {"path": path}
        if mode is not None:
            query["mode"] = "%o" % (mode & 0o777)
        w = self._sb._t.call("PUT", _q(self._sb.sandbox_id, "/files"), query=query, body=body,
                             timeout=request_timeout, headers=headers) or {}
        at = w.get("path") or path
        return WriteInfo(name=at.rstrip("/").rsplit("/", 1)[-1], path=at)

    def list(self, path: str = ".", depth: int = 1) -> List[EntryInfo]:
        if depth != 1:
            raise SandboxException("depth: cordon lists one directory level at a time", code="invalid_request")
        doc = self._sb._t.call("GET", _q(self._sb.sandbox_id, "/dir"), query={"path": path})
        base = doc.get("path", path).rstrip("/")
        return [EntryInfo(e["name"], FileType(e.get("type", "other")), base + "/" + e["name"], e.get("size", 0), e.get("mode", 0),
                          e.get("mtimeMs", 0), e.get("target")) for e in doc.get("entries", [])]

    def get_info(self, path: str) -> EntryInfo:
        return _entry(self._sb._t.call("GET", _q(self._sb.sandbox_id, "/stat"), query={"path": path}), path)

    def exists(self, path: str) -> bool:
        try:
            self.get_info(path)
            return True
        except NotFoundException:
            return False

    def make_dir(self, path: str) -> bool:
        existed = self.exists(path)
        self._sb._t.call("POST", _q(self._sb.sandbox_id, "/dir"), query={"path": path})
        return not existed

    def rename(self, old_path: str, new_path: str) -> EntryInfo:
        """Moves old_path to new_path (replacing a file there), as E2B's;
        returns what is now at new_path."""
        return _entry(self._sb._t.call("POST", _q(self._sb.sandbox_id, "/rename"), query={"path": old_path, "to": new_path}), new_path)

    def remove(self, path: str):
        self._sb._t.call("DELETE", _q(self._sb.sandbox_id, "/files"), query={"path": path, "recursive": 1})

    def watch_dir(self, path: str, on_event: Optional[Callable[[FilesystemEvent], None]] = None, recursive: bool = False) -> WatchHandle:
        """Watches a directory; once it returns, every change is reported."""
        q = {"path": path}
        if recursive:
            q["recursive"] = 1
        resp = self._sb._t.open("GET", _q(self._sb.sandbox_id, "/agent/watch"), query=q, timeout=None)
        return WatchHandle(resp, on_event)

    watch = watch_dir


@dataclass
class SandboxInfo:
    sandbox_id: str
    state: str
    tier: str
    metadata: Dict[str, str] = field(default_factory=dict)
    started_at: Optional[str] = None
    end_at: Optional[str] = None
    boot_id: Optional[str] = None


class SandboxState(str, enum.Enum):
    RUNNING = "running"
    PAUSED = "paused"


@dataclass
class SandboxQuery:
    """E2B's filter of Sandbox.list: the sandboxes that carry every one of
    metadata's labels, in one of state's states."""

    metadata: Optional[Dict[str, str]] = None
    state: Optional[List[Union[SandboxState, str]]] = None


@dataclass
class SandboxMetrics:
    """What a sandbox uses at one moment, as E2B's SandboxMetrics, with
    cordon's counts after. mem_total is the sandbox's memory limit (0:
    none); mem_used is None where its tier does not count memory."""

    cpu_count: float
    cpu_used_pct: float
    disk_total: int
    disk_used: int
    mem_total: int
    mem_used: Optional[int]
    timestamp: datetime.datetime
    cpu_seconds: float = 0.0
    tasks: int = 0
    tasks_limit: int = 0
    oom_kills: Optional[int] = None


def _metrics(m) -> "SandboxMetrics":
    """The daemon's metrics as E2B's SandboxMetrics."""
    return SandboxMetrics(
        cpu_count=m.get("cpuCount", 0), cpu_used_pct=m.get("cpuUsedPct", 0.0),
        disk_total=m.get("diskTotalBytes", 0), disk_used=m.get("diskUsedBytes", 0),
        mem_total=m.get("memoryLimitBytes", 0), mem_used=m.get("memoryBytes"),
        timestamp=_time(m["timestamp"]), cpu_seconds=m.get("cpuSeconds", 0.0),
        tasks=m.get("tasks", 0), tasks_limit=m.get("tasksLimit", 0), oom_kills=m.get("oomKills"))


def _time(s):
    """An RFC 3339 time of the daemon's (nanoseconds, Z) as a datetime."""
    s = re.sub(r"\.(\d+)", lambda m: "." + (m.group(1) + "00000")[:6], s).replace("Z", "+00:00")
    return datetime.datetime.fromisoformat(s)


class Paginator(list):
    """What Sandbox.list and Sandbox.list_snapshots return: the whole list
    (E2B's v1 SDK returned one), and E2B's v2 paginator over it, limit
    items a page: while p.has_next: p.next_items()."""

    def __init__(self, items, limit: Optional[int] = None):
        if limit is not None and (not isinstance(limit, int) or limit < 1):
            raise InvalidArgumentException("limit is a whole number of 1 or more", code="invalid_request")
        super().__init__(items)
        self._limit = limit
        self._next = 0
        self._started = False

    @property
    def has_next(self) -> bool:
        """Whether next_items has a page to give (the first, even if empty)."""
        return not self._started or self._next < len(self)

    def next_items(self) -> list:
        """The next page; past the last, SandboxException."""
        if not self.has_next:
            raise SandboxException("No more items to fetch", code="invalid_request")
        end = len(self) if self._limit is None else self._next + self._limit
        page = list(self[self._next:end])
        self._started, self._next = True, min(end, len(self))
        return page


class Sandbox:
    """A sandbox on a cordon daemon. Sandbox() (or Sandbox.create()) makes
    one; use it as a context manager to have it killed at the end."""

    def __init__(
        self,
        template: Optional[str] = None,
        timeout: Optional[int] = None,
        metadata: Optional[Dict[str, str]] = None,
        envs: Optional[Dict[str, str]] = None,
        api_key: Optional[str] = None,
        host: Optional[str] = None,
        request_timeout: Optional[float] = None,
        tier: Optional[str] = None,
        memory_mb: Optional[int] = None,
        allow: Optional[List[str]] = None,
        allow_internet_access: Optional[bool] = None,
        pool: Optional[str] = None,
        snapshot: Optional[str] = None,
        template_name: Optional[str] = None,
        persistent: bool = False,
        disk_mb: Optional[int] = None,
        autostart: bool = False,
        network: Optional[Dict[str, List[str]]] = None,
        _sandbox_id: Optional[str] = None,
        _transport: Optional[Transport] = None,
    ):
        self._t = _transport or Transport(host, api_key, request_timeout)
        if _sandbox_id is None:
            spec = {}
            if template:
                spec["image"] = template
            if tier:
                spec["tier"] = tier
            if envs:
                spec["env"] = envs
            limits = {}
            if memory_mb:
                limits["memoryBytes"] = int(memory_mb) << 20
            if disk_mb:
                limits["diskBytes"] = int(disk_mb) << 20
            if limits:
                spec["limits"] = limits
            if persistent:
                spec["persistentWorkspace"] = True
            if autostart:
                spec["autostart"] = True
            if allow and allow_internet_access:
                raise SandboxException("allow and allow_internet_access=True: give one (the hosts it may reach, or any public one)", code="invalid_request")
            if network is not None:
                if allow or allow_internet_access is not None:
                    raise InvalidArgumentException("network, or allow and allow_internet_access: give one way to say what the sandbox may reach", code="invalid_request")
                spec["egress"] = _network_egress(network)
            elif allow:
                spec["egress"] = {"mode": "static", "rules": [_rule(h) for h in allow]}
            elif allow_internet_access:
                # E2B's word for any public address; private, loopback and
                # metadata addresses stay refused (docs/egress.md).
                spec["egress"] = {"mode": "allow-all"}
            body = dict(spec)
            body["ttlSeconds"] = int(timeout if timeout is not None else DEFAULT_SANDBOX_TIMEOUT)
            if metadata:
                body["labels"] = metadata
            if pool:
                body["pool"] = pool
            if snapshot:
                body["fromSnapshot"] = snapshot
            if template_name:
                body["template"] = template_name
            _sandbox_id = self._t.call("POST", "/v1/sandboxes", body=body)["id"]
        self.sandbox_id = _sandbox_id
        self._max_timeout_ms = None
        self.commands = Commands(self)
        self.pty = Pty(self)
        self.files = Files(self)

    @classmethod
    def create(cls, template: Optional[str] = None, **kwargs) -> "Sandbox":
        return cls(template, **kwargs)

    @_either
    def connect(self, timeout: Optional[int] = None) -> "Sandbox":
        """The sandbox, running: a paused one is thawed and a stopped
        persistent one started again, as E2B's connect resumes a paused
        sandbox. With timeout, in seconds, its end is moved to that long
        from now if that is later than its end was (never sooner). A
        sandbox that is gone raises NotFoundException."""
        info = self._t.call("GET", _q(self.sandbox_id))
        state = info.get("state")
        if state in ("destroyed", "destroying"):
            raise NotFoundException("sandbox %s is %s" % (self.sandbox_id, state), code="not_found")
        if state in ("paused", "suspended"):
            self._t.call("POST", _q(self.sandbox_id, "/resume"))
        if timeout:
            end = info.get("expiresAt")
            if end and _time(end) < datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=timeout):
                self.set_timeout(timeout)
        return self

    @_either
    def pause(self, keep_memory: bool = True) -> bool:
        """Pauses the sandbox until connect() (or start()): every process
        frozen where it is, its memory kept (on the host, not written
        out, as E2B's is; the sandbox's TTL still runs). keep_memory=False
        stops a persistent sandbox instead (stop()): its files kept, its
        processes ended, as E2B's drops the memory of one. False if it was
        paused (or stopped) already."""
        state = self._t.call("GET", _q(self.sandbox_id)).get("state")
        if state == ("paused" if keep_memory else "suspended"):
            return False
        self._t.call("POST", _q(self.sandbox_id, "/pause" if keep_memory else "/suspend"))
        return True

    @_either
    def beta_pause(self, keep_memory: bool = True) -> bool:
        """pause(), by E2B's earlier name."""
        return self.pause(keep_memory)

    @classmethod
    def list(cls, api_key: Optional[str] = None, host: Optional[str] = None, query: Optional[SandboxQuery] = None,
             limit: Optional[int] = None) -> "Paginator":
        """Your sandboxes that are not destroyed; with query (E2B's), those
        with all its metadata and in one of its states. A list, which is
        also E2B's paginator (has_next, next_items(), limit a page)."""
        t = Transport(host, api_key)
        path, states = "/v1/sandboxes", None
        if query is not None:
            if isinstance(query, dict):
                query = SandboxQuery(**query)
            if query.metadata:
                path += "?" + urllib.parse.urlencode([("label", k + "=" + v) for k, v in query.metadata.items()])
            if query.state:
                states = {getattr(s, "value", s) for s in query.state}
        doc = t.call("GET", path)
        items = doc.get("sandboxes", doc) if isinstance(doc, dict) else doc
        return Paginator([_info(s) for s in items if s.get("state") != "destroyed" and (states is None or s.get("state") in states)], limit)

    @property
    def id(self) -> str:
        return self.sandbox_id

    @_either
    def get_info(self) -> SandboxInfo:
        return _info(self._t.call("GET", _q(self.sandbox_id)))

    def is_running(self) -> bool:
        """Whether it runs: not paused, stopped or gone, as E2B's."""
        try:
            return self.get_info().state == "running"
        except NotFoundException:
            return False

    def _ceiling_ms(self) -> int:
        """The longest timeout the sandbox lets a command have: its create's
        maxTimeoutMs, else the agent's 30 minutes."""
        if self._max_timeout_ms is None:
            spec = self._t.call("GET", _q(self.sandbox_id)).get("spec") or {}
            self._max_timeout_ms = int(spec.get("maxTimeoutMs") or DEFAULT_MAX_TIMEOUT_MS)
        return self._max_timeout_ms

    @_either
    def set_timeout(self, timeout: int) -> None:
        """Destroys the sandbox timeout seconds from now, whatever it is
        doing, rather than when it was to end: a longer life or a shorter
        one, as E2B's set_timeout (0: the daemon's default, which may be
        none; never past the daemon's maximum)."""
        self._t.call("PATCH", _q(self.sandbox_id), body={"ttlSeconds": int(timeout)})

    @_either
    def update_network(self, network: Dict[str, List[str]]) -> None:
        """Replaces what the sandbox may reach with E2B's network options,
        as Sandbox(network=) takes them: new connections follow at once,
        and open ones it no longer allows are closed."""
        self._t.call("PUT", _q(self.sandbox_id, "/network-policy"), body=_network_egress(network))

    @_either
    def get_metrics(self, start: Optional[datetime.datetime] = None, end: Optional[datetime.datetime] = None) -> List[SandboxMetrics]:
        """What the sandbox used from start to end (its create and now when
        not given), oldest first, in E2B's shape: the daemon's readings
        (every 5 seconds, kept for 15 minutes, unless cordon serve was told
        otherwise), each cpu_used_pct since the reading before; then, when
        the window reaches now and the sandbox runs, one taken now. Naive
        datetimes are local time, as datetime.timestamp() takes them."""
        query = {}
        if start is not None:
            query["start"] = int(math.floor(start.timestamp()))
        if end is not None:
            query["end"] = int(math.ceil(end.timestamp()))
        doc = self._t.call("GET", _q(self.sandbox_id, "/metrics/history"), query=query)
        out = [_metrics(m) for m in doc.get("metrics") or []]
        if end is None or end.timestamp() >= time.time():
            try:
                out.append(_metrics(self._t.call("GET", _q(self.sandbox_id, "/metrics"))))
            except SandboxException as e:
                if e.status != 409:  # paused or stopped: its readings until then
                    raise
        return out

    @_either
    def kill(self) -> bool:
        """Destroys the sandbox; returns once its teardown is confirmed
        (False if it was gone already)."""
        try:
            if self._t.call("GET", _q(self.sandbox_id)).get("state") == "destroyed":
                return False
            self._t.call("DELETE", _q(self.sandbox_id))
            return True
        except NotFoundException:
            return False

    def snapshot(self, ttl: Optional[int] = None) -> "SnapshotInfo":
        """Captures the sandbox's writable state (workspace and home; not its
        processes, which are stopped for the capture and go on after).
        Sandbox(snapshot=info.snapshot_id) restores it."""
        body = {"ttlSeconds": int(ttl)} if ttl else {}
        return _snapshot(self._t.call("POST", _q(self.sandbox_id, "/snapshot"), body=body))

    def create_snapshot(self, name: Optional[str] = None) -> "SnapshotInfo":
        """snapshot(), by E2B's name. A cordon snapshot has no name: one
        given is refused (a template names a spec with a snapshot)."""
        if name is not None:
            raise InvalidArgumentException("a cordon snapshot has no name; a template names one (cordon template save)", code="invalid_request")
        return self.snapshot()

    def stop(self) -> None:
        """Stops everything a persistent sandbox (persistent=True) runs,
        keeping its files, until start()."""
        self._t.call("POST", _q(self.sandbox_id, "/suspend"))

    def start(self) -> None:
        """Starts a stopped persistent sandbox again on its files (a new
        boot id, nothing of before running)."""
        self._t.call("POST", _q(self.sandbox_id, "/resume"))

    def fork(self, count: int = 1) -> List["Sandbox"]:
        """New sandboxes (1 to 32) from this one's state as it is now."""
        doc = self._t.call("POST", _q(self.sandbox_id, "/fork"), body={"count": int(count)})
        return [Sandbox(_sandbox_id=s["id"], _transport=self._t) for s in doc.get("sandboxes", [])]

    @classmethod
    def list_snapshots(cls, api_key: Optional[str] = None, host: Optional[str] = None, limit: Optional[int] = None) -> "Paginator":
        """Your snapshots: a list, which is also E2B's paginator."""
        return Paginator([_snapshot(s) for s in Transport(host, api_key).call("GET", "/v1/snapshots").get("snapshots", [])], limit)

    @classmethod
    def delete_snapshot(cls, snapshot_id: str, api_key: Optional[str] = None, host: Optional[str] = None) -> bool:
        try:
            Transport(host, api_key).call("DELETE", "/v1/snapshots/" + urllib.parse.quote(snapshot_id, safe=""))
            return True
        except NotFoundException:
            return False

    def download_url(self, path: str, user: Optional[str] = None, use_signature_expiration: Optional[int] = None) -> str:
        """A URL of the daemon that reads the file at path without a key
        (a browser's link), as E2B's: for use_signature_expiration seconds,
        1 to 86400 (an hour when not given; cordon's always expire)."""
        return self._file_url(path, "GET", user, use_signature_expiration)

    def upload_url(self, path: Optional[str] = None, user: Optional[str] = None, use_signature_expiration: Optional[int] = None) -> str:
        """A URL of the daemon that writes the file at path without a key:
        POST a form whose part "file" holds its bytes, as E2B's is used, or
        PUT the bytes as the body. For use_signature_expiration seconds, 1 to
        86400 (an hour when not given)."""
        if not path:
            raise InvalidArgumentException("upload_url needs the path to write: a cordon file URL names one file", code="invalid_request")
        return self._file_url(path, "PUT", user, use_signature_expiration)

    def _file_url(self, path, method, user, expires):
        if user is not None:
            raise SandboxException("user: files are the sandbox's own user's; cordon takes no other", code="unsupported")
        body = {"path": path, "method": method}
        if expires is not None:
            body["expiresInSeconds"] = int(expires)
        u = self._t.call("POST", _q(self.sandbox_id, "/file-urls"), body=body)["url"]
        return u if "://" in u else self._t.base + u

    def get_host(self, port: int) -> str:
        """A URL for a port a program in the sandbox listens on."""
        p = self._t.call("POST", _q(self.sandbox_id, "/ports"), body={"port": port})
        url = p["url"]
        return url if "://" in url else self._t.base + url

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.kill()


@dataclass
class SnapshotInfo:
    snapshot_id: str
    source: str
    size: int
    files: int
    paths: List[str]
    created_at: Optional[str] = None
    expires_at: Optional[str] = None


def _snapshot(s):
    return SnapshotInfo(s["id"], s.get("source", ""), s.get("size", 0), s.get("files", 0), s.get("paths") or [], s.get("createdAt"), s.get("expiresAt"))


def _chunks(f, size=1 << 20):
    """A file object's content, read a piece at a time (text encoded)."""
    while True:
        try:
            piece = f.read(size)
        except OSError as e:
            # Its own error, not the daemon's unreachability.
            raise SandboxException("data: reading the file object: %s; the file in the sandbox was left as it was" % e) from e
        if not piece:
            return
        yield piece.encode() if isinstance(piece, str) else piece


ALL_TRAFFIC = "0.0.0.0/0"  # E2B's name for every address, in network's deny_out


def _network_egress(network) -> dict:
    """E2B's network options (allow_out, deny_out) as a cordon egress
    policy. cordon's egress is an allowlist: deny_out may deny all traffic
    (ALL_TRAFFIC, or ::/0), with allow_out the hosts and addresses still
    reached (as allow takes them: host, host:port, IP or CIDR; 80 and 443
    without a port); with nothing denied every public address is reached,
    as E2B's default. A narrower deny_out, allow_out with nothing denied,
    or another option is refused, not taken for something else."""
    get = network.get if isinstance(network, dict) else (lambda k, d=None: getattr(network, k, d))
    unknown = set(network) - {"allow_out", "deny_out"} if isinstance(network, dict) else set()
    if unknown:
        raise InvalidArgumentException("network takes allow_out and deny_out; cordon has no %s" % ", ".join(sorted(unknown)), code="invalid_request")
    allow_out, deny_out = list(get("allow_out") or []), list(get("deny_out") or [])
    if not all(isinstance(h, str) for h in allow_out + deny_out):
        raise InvalidArgumentException("network's allow_out and deny_out are lists of strings", code="invalid_request")
    if any(d not in (ALL_TRAFFIC, "::/0") for d in deny_out):
        raise InvalidArgumentException("deny_out: cordon's egress is an allowlist; it can deny all traffic (%s) with allow_out the exceptions, not a part of it" % ALL_TRAFFIC, code="invalid_request")
    if not deny_out:
        if allow_out:
            raise InvalidArgumentException("allow_out names exceptions to deny_out, and nothing is denied: every public address is reached already", code="invalid_request")
        return {"mode": "allow-all"}
    if not allow_out:
        return {"mode": "deny-all"}
    return {"mode": "static", "rules": [_rule(h) for h in allow_out]}


def _rule(h):
    host, _, port = h.rpartition(":") if h.count(":") == 1 else (h, "", "")
    if host and port.isdigit():
        return {"host": host, "ports": [int(port)]}
    return {"host": h}


def _info(s):
    return SandboxInfo(s["id"], s.get("state", ""), (s.get("spec") or {}).get("tier", ""), s.get("labels") or {}, s.get("createdAt"), s.get("expiresAt"), s.get("bootId"))
