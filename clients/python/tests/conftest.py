"""Starts a real daemon for the tests (cordon serve --ephemeral, its state in
a directory of its own), unless CORDON_HOST names one already."""

import os
import pathlib
import secrets
import shutil
import socket
import subprocess
import tempfile
import time

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session", autouse=True)
def daemon():
    if os.environ.get("CORDON_HOST"):
        yield os.environ["CORDON_HOST"]
        return
    cordon = os.environ.get("CORDON_BIN") or str(REPO / "bin" / "cordon")
    # Sandboxes run as unprivileged users that must pass through it.
    d = tempfile.mkdtemp(prefix="cordon-pytest-")
    os.chmod(d, 0o711)
    # Over TCP with an API key, as a remote caller reaches a daemon (and so
    # that exposed ports have a URL the tests can open).
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    key = secrets.token_hex(24)
    keyfile = os.path.join(d, "admin.key")
    with open(keyfile, "w") as f:
        f.write(key)
    env = dict(os.environ, CORDON_STATE_DIR=os.path.join(d, "sandboxes"))
    p = subprocess.Popen([cordon, "serve", "--ephemeral", "--listen", "tcp://127.0.0.1:%d" % port, "--admin-key-file", keyfile,
                          "--state-dir", os.path.join(d, "state"), "--metrics-interval", "200ms"], env=env)
    deadline = time.time() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if p.poll() is not None or time.time() > deadline:
                raise RuntimeError("cordon serve did not start")
            time.sleep(0.02)
    os.environ["CORDON_HOST"] = "http://127.0.0.1:%d" % port
    os.environ["CORDON_API_KEY"] = key
    try:
        yield os.environ["CORDON_HOST"]
    finally:
        del os.environ["CORDON_HOST"]
        del os.environ["CORDON_API_KEY"]
        p.terminate()
        p.wait(60)
        shutil.rmtree(d, ignore_errors=True)
