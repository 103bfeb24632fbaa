package main_test

// cordon cp and a sandbox's files through the daemon: copies both ways,
// HEAD of a file, the refusals, names that act on a terminal.

import (
	"bytes"
	"crypto/md5"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/server/api"
	sclient "github.com/cordon-sandbox/cordon/server/client"
)

// TestDaemonCopy: cordon cp reads any file of the sandbox's own view
// (/etc/hostname), and copies directories both ways, as trees and as tar
// streams, with their permission bits; what it cannot copy (a symbolic
// link) it skips and says so.
func TestDaemonCopy(t *testing.T) {
	testutil.RequiresRoot(t)
	_, sock, d := serveInTemp(t)
	defer d.stop(t, sock)
	host := "--host=unix://" + sock
	run := onDaemon(t, host)
	id, _, _ := run("create")
	id = strings.TrimSpace(id)
	defer run("rm", id)
	if out, errOut, code := run("cp", id+":/etc/hostname", "-"); code != 0 || out != "cordon\n" {
		t.Fatalf("cp ID:/etc/hostname -: %d %q %s", code, out, errOut)
	}
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "tree", "sub"), 0o755)
	os.WriteFile(filepath.Join(src, "tree", "a.txt"), []byte("a\n"), 0o644)
	os.WriteFile(filepath.Join(src, "tree", "sub", "run.sh"), []byte("#!/bin/sh\necho ran\n"), 0o755)
	os.Symlink("a.txt", filepath.Join(src, "tree", "link"))
	if _, errOut, code := run("cp", filepath.Join(src, "tree"), id+":up"); code != 0 || !strings.Contains(errOut, "skipped") {
		t.Fatalf("cp DIR ID:up: %d %s", code, errOut)
	}
	if out, errOut, code := run("exec", id, "--", "sh", "-c", "cat up/a.txt; up/sub/run.sh; test -e up/link || echo no-link"); code != 0 || out != "a\nran\nno-link\n" {
		t.Fatalf("inside after the copy in: %q %s", out, errOut)
	}
	dst := t.TempDir()
	if _, errOut, code := run("cp", id+":up", filepath.Join(dst, "back")); code != 0 {
		t.Fatalf("cp ID:up DIR: %d %s", code, errOut)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "back", "sub", "run.sh")); err != nil || string(b) != "#!/bin/sh\necho ran\n" {
		t.Fatalf("copied out: %q %v", b, err)
	}
	if st, err := os.Stat(filepath.Join(dst, "back", "sub", "run.sh")); err != nil || st.Mode().Perm() != 0o755 {
		t.Fatalf("its mode: %v %v", st.Mode(), err)
	}
	// Out as a tar stream, and back in from one.
	cmd := exec.Command(buildCLI(t), "cp", host, id+":up", "-")
	tarball, err := cmd.Output()
	if err != nil {
		t.Fatalf("cp ID:up -: %v", err)
	}
	in := exec.Command(buildCLI(t), "cp", host, "--tar", "-", id+":again")
	in.Stdin = bytes.NewReader(tarball)
	if b, err := in.CombinedOutput(); err != nil {
		t.Fatalf("cp --tar - ID:again: %v %s", err, b)
	}
	if out, _, _ := run("exec", id, "--", "sh", "-c", "cat again/a.txt; again/sub/run.sh"); out != "a\nran\n" {
		t.Fatalf("after the tar round trip: %q", out)
	}
	// Standard input streams in as it comes, of a length known only at
	// its end, spooled nowhere (the temporary directory does not exist).
	stream := exec.Command(buildCLI(t), "cp", host, "-", id+":streamed.bin")
	stream.Env = append(os.Environ(), "TMPDIR="+filepath.Join(dst, "none"))
	pw, err := stream.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	stream.Stderr = &errb
	if err := stream.Start(); err != nil {
		t.Fatal(err)
	}
	piece := bytes.Repeat([]byte("0123456789abcdef"), 64<<10)
	for range 3 {
		pw.Write(piece)
		time.Sleep(100 * time.Millisecond)
	}
	pw.Close()
	if err := stream.Wait(); err != nil {
		t.Fatalf("cp - ID:streamed.bin: %v %s", err, errb.String())
	}
	if out, _, _ := run("exec", id, "--", "sh", "-c", "wc -c < streamed.bin; md5sum < streamed.bin"); out != fmt.Sprintf("%d\n%x  -\n", 3*len(piece), md5.Sum(bytes.Repeat(piece, 3))) {
		t.Fatalf("the streamed file: %q", out)
	}
}

// TestDaemonFileHead: a HEAD of a sandbox's file answers as its GET would,
// without the bytes: the size and that ranges are taken for a file (a
// symlink's target's), 404 for a missing one, 400 for a directory; and so
// does a HEAD of a stat or a listing.
func TestDaemonFileHead(t *testing.T) {
	testutil.RequiresRoot(t)
	_, sock, d := serveInTemp(t)
	defer d.stop(t, sock)
	c, err := sclient.New("unix://"+sock, "")
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.Create(t.Context(), api.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := cordon(t, "exec", "--host=unix://"+sock, sb.ID, "--", "sh", "-c", "head -c 12345 /dev/zero > f.bin; ln -s f.bin link; mkdir d"); code != 0 {
		t.Fatalf("exec: exit %d, %q, %s", code, out, errOut)
	}
	hc := unixHTTP(sock)
	for path, want := range map[string]struct {
		status int
		length string
	}{"files?path=f.bin": {200, "12345"}, "files?path=link": {200, "12345"}, "files?path=missing": {404, ""}, "files?path=d": {400, ""},
		"stat?path=f.bin": {200, ""}, "stat?path=missing": {404, ""}, "dir?path=d": {200, ""}} {
		resp, err := hc.Head("http://cordon/v1/sandboxes/" + sb.ID + "/" + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want.status || want.length != "" && (resp.Header.Get("Content-Length") != want.length || resp.Header.Get("Accept-Ranges") != "bytes") || resp.ContentLength == 0 && want.status == 200 {
			t.Errorf("HEAD %s: %d %v, want %d with length %q", path, resp.StatusCode, resp.Header, want.status, want.length)
		}
	}
}

// TestDaemonFileRefusals: a file the sandbox may not write is 403
// (outside its writable places, a directory it may not write to, a file
// it may not read), a full writable space 507 naming the caller's path
// (not the agent's temporary file) with the old file kept, through the
// REST API and cordon cp.
func TestDaemonFileRefusals(t *testing.T) {
	id, host, run := daemonSandbox(t, "--disk", "2m")
	if _, errOut, code := run("exec", id, "--", "sh", "-c", "echo old > kept; mkdir ro; chmod 500 ro"); code != 0 {
		t.Fatalf("exec: %s", errOut)
	}
	hc := unixHTTP(strings.TrimPrefix(host, "--host=unix://"))
	// do sends method to the file path and reads the refusal it answers.
	do := func(method, path string, body []byte) (int, api.Error) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://cordon/v1/sandboxes/"+id+"/files?path="+path, bytes.NewReader(body))
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e api.Error
		json.NewDecoder(resp.Body).Decode(&e)
		return resp.StatusCode, e
	}
	big := bytes.Repeat([]byte("x"), 3<<20)
	for _, c := range []struct {
		method, path string
		body         []byte
		status       int
		code, says   string
	}{
		{"PUT", "/etc/x", []byte("x"), 403, api.CodeForbidden, "/etc/x is outside the places"},
		{"PUT", "ro/x", []byte("x"), 403, api.CodeForbidden, "permission denied"},
		{"GET", "/proc/self/environ", nil, 403, api.CodeForbidden, "permission denied"},
		{"PUT", "kept", big, 507, api.CodeNoSpace, "writing kept: no space left"},
	} {
		status, e := do(c.method, c.path, c.body)
		if status != c.status || e.Code != c.code || !strings.Contains(e.Message, c.says) || strings.Contains(e.Message, ".cordon-") {
			t.Errorf("%s %s: %d %+v, want %d %s saying %q", c.method, c.path, status, e, c.status, c.code, c.says)
		}
	}
	src := filepath.Join(t.TempDir(), "big")
	os.WriteFile(src, big, 0o644)
	if _, errOut, code := run("cp", src, id+":kept"); code != 125 || !strings.Contains(errOut, "no_space") || !strings.Contains(errOut, "writable space is full") {
		t.Errorf("cp of too much: %d %s", code, errOut)
	}
	if out, _, _ := run("exec", id, "--", "cat", "kept"); out != "old\n" {
		t.Errorf("the file after the refusals: %q", out)
	}
	// Out of files rather than bytes (a 2 MiB space holds 512), it says so.
	run("exec", id, "--", "sh", "-c", "mkdir many; i=0; while touch many/$i 2>/dev/null; do i=$((i+1)); done")
	if status, e := do("PUT", "one-more", []byte("x")); status != 507 || !strings.Contains(e.Message, "holds all the files it may (512") {
		t.Errorf("a file past the space's count: %d %+v", status, e)
	}
}

// TestCpNamesEscaped: copying a directory out of a sandbox whose names
// were made to act on a terminal (an escape sequence in a file's name, a
// FIFO's, which is skipped and said so) keeps the file as named but says
// every name on cordon's stderr escaped.
func TestCpNamesEscaped(t *testing.T) {
	testutil.RequiresRoot(t)
	_, sock, d := serveInTemp(t)
	defer d.stop(t, sock)
	host := "--host=unix://" + sock
	out, errOut, code := cordon(t, "create", host)
	if code != 0 {
		t.Fatalf("create: exit %d, %s", code, errOut)
	}
	id := strings.TrimSpace(out)
	if out, errOut, code := cordon(t, "exec", host, id, "--", "sh", "-c", `mkdir d && printf x > "d/$(printf '\033]0;pwn\007')" && mkfifo "d/$(printf '\033[2J')"`); code != 0 {
		t.Fatalf("exec: exit %d, %q, %s", code, out, errOut)
	}
	dst := filepath.Join(t.TempDir(), "d")
	_, errOut, code = cordon(t, "cp", host, id+":d", dst)
	if code != 0 || strings.Contains(errOut, "\x1b") || !strings.Contains(errOut, `\x1b[2J`) {
		t.Fatalf("cp: exit %d, stderr %q", code, errOut)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "\x1b]0;pwn\a")); err != nil || string(b) != "x" {
		t.Fatalf("the copied file: %q, %v", b, err)
	}
}

// TestBinaryToTerminal: a directory copied out to - is a tar, and a
// snapshot's export is one: on a terminal (a real one here) both are
// refused, saying where to send them, rather than written there with the
// sandbox's bytes, escape sequences among them. To a pipe they go as
// before (TestDaemonCopy, TestSnapshotVerbs).
func TestBinaryToTerminal(t *testing.T) {
	id, host, run := daemonSandbox(t)
	if _, errOut, code := run("exec", id, "--", "sh", "-c", "mkdir -p d && printf '\\033]0;pwned\\007' > d/x"); code != 0 {
		t.Fatalf("exec: %d %s", code, errOut)
	}
	p := startOnPTY(t, 24, 80, "cp", host, id+":d", "-")
	if code := p.exitCode(); code != 2 || !strings.Contains(p.screen(), "standard output is a terminal") || strings.Contains(p.screen(), "pwned") {
		t.Fatalf("cp ID:DIR - on a terminal: exit %d, %q", code, p.screen())
	}
	sid, errOut, code := run("snapshot", id)
	if code != 0 {
		t.Fatalf("snapshot: %d %s", code, errOut)
	}
	p = startOnPTY(t, 24, 80, "snapshot", "export", host, strings.TrimSpace(sid))
	if code := p.exitCode(); code != 2 || !strings.Contains(p.screen(), "standard output is a terminal") {
		t.Fatalf("snapshot export on a terminal: exit %d, %q", code, p.screen())
	}
}
