"""The daemon's HTTP transport: a unix socket, or http(s) over TCP."""

import http.client
import json
import os
import socket
import ssl
import urllib.parse

from .errors import SandboxException, TimeoutException, from_response

DEFAULT_SOCKET = "/run/cordon/cordon.sock"


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=None):
        super().__init__("cordon", timeout=timeout)
        self._path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if self.timeout is not None:
            s.settimeout(self.timeout)
        s.connect(self._path)
        self.sock = s


class Transport:
    """Where the daemon is and the key to use: arguments first, then
    CORDON_HOST and CORDON_API_KEY, as the CLI finds them."""

    def __init__(self, host=None, api_key=None, request_timeout=None):
        host = host or os.environ.get("CORDON_HOST") or DEFAULT_SOCKET
        self.api_key = api_key if api_key is not None else os.environ.get("CORDON_API_KEY", "")
        self.request_timeout = request_timeout
        if host.startswith("unix://") or host.startswith("/"):
            self._unix = host[len("unix://"):] if host.startswith("unix://") else host
            self.base = "http://cordon"
        elif host.startswith("tcp://"):
            self._unix = None
            self.base = "http://" + host[len("tcp://"):]
        elif host.startswith("http://") or host.startswith("https://"):
            self._unix = None
            self.base = host.rstrip("/")
        else:
            raise SandboxException("cordon host %r: want unix:///path, /path, tcp://host:port or http(s)://host:port" % host)
        self.host = host

    def _connect(self, timeout):
        if self._unix:
            return _UnixConnection(self._unix, timeout=timeout)
        u = urllib.parse.urlsplit(self.base)
        if u.scheme == "https":
            return http.client.HTTPSConnection(u.hostname, u.port or 443, timeout=timeout, context=ssl.create_default_context())
        return http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)

    def open(self, method, path, query=None, body=None, headers=None, timeout=None):
        """Sends a request and returns the open response (2xx), or raises the
        daemon's refusal as a typed error."""
        if query:
            path += "?" + urllib.parse.urlencode(query)
        h = {"Accept": "application/json"}
        if self.api_key:
            h["Authorization"] = "Bearer " + self.api_key
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        if headers:
            h.update(headers)
        conn = self._connect(timeout if timeout is not None else self.request_timeout)
        try:
            conn.request(method, path, body=body, headers=h)
            resp = conn.getresponse()
        except socket.timeout as e:
            conn.close()
            raise TimeoutException("the daemon did not answer in time: %s" % e) from e
        except OSError as e:
            conn.close()
            raise SandboxException("cannot reach the cordon daemon at %s: %s" % (self.host, e)) from e
        except BaseException:
            # The body failed as it was sent: the request was cut off
            # before its end, and the daemon writes nothing of it.
            conn.close()
            raise
        if resp.status >= 300:
            data = resp.read()
            conn.close()
            raise from_response(resp.status, data)
        resp._cordon_conn = conn
        return resp

    def call(self, method, path, query=None, body=None, timeout=None, headers=None):
        """A request whose answer is JSON (or nothing)."""
        resp = self.open(method, path, query=query, body=body, headers=headers, timeout=timeout)
        try:
            data = resp.read()
        finally:
            resp._cordon_conn.close()
        return json.loads(data) if data else None

    @staticmethod
    def lines(resp):
        """The NDJSON lines of a streamed answer, parsed."""
        try:
            while True:
                line = resp.readline()
                if not line:
                    return
                line = line.strip()
                if line:
                    yield json.loads(line)
        finally:
            resp._cordon_conn.close()
