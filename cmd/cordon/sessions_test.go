package main_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/agent/wire"
	"github.com/cordon-sandbox/cordon/internal/testutil"
)

// TestSessionVerbs: a program started with exec -d outlives the call that
// started it and the attach that followed it (killed with SIGKILL): a
// second attach reads its whole output from offset 0, or from the middle,
// and exits with its status; sessions lists it; kill stops a session whose
// leader ignores TERM, and confirms it.
func TestSessionVerbs(t *testing.T) {
	id, host, run := daemonSandbox(t)
	sess, errOut, code := run("exec", "-d", "--name", "build", id, "--", "sh", "-c", "echo first; sleep 0.1; echo warn >&2; sleep 1; echo second; exit 4")
	if code != 0 || strings.TrimSpace(sess) != "build" {
		t.Fatalf("exec -d: %d %q %s", code, sess, errOut)
	}
	// A follower, killed with SIGKILL mid-way.
	follower := exec.Command(buildCLI(t), "attach", host, id, "build")
	var fo bytes.Buffer
	follower.Stdout = &fo
	if err := follower.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(fo.String(), "first") && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	_ = follower.Process.Signal(syscall.SIGKILL)
	_ = follower.Wait()
	if !strings.Contains(fo.String(), "first") {
		t.Fatalf("the first follower read %q", fo.String())
	}
	// A second one reads it all and exits with the session's status.
	out, errOut, code := run("attach", id, "build")
	if out != "first\nsecond\n" || errOut != "warn\n" || code != 4 {
		t.Fatalf("attach from 0: %d %q %q", code, out, errOut)
	}
	// From the middle: byte 6 is "warn\n" (stderr), then "second\n".
	out, errOut, code = run("attach", "--from", "6", id, "build")
	if out != "second\n" || errOut != "warn\n" || code != 4 {
		t.Fatalf("attach from 6: %d %q %q", code, out, errOut)
	}
	if out, _, code := run("sessions", id); code != 0 || !strings.Contains(out, "build") || !strings.Contains(out, "exited 4") {
		t.Fatalf("sessions: %d %s", code, out)
	}
	// kill: the leader ignores TERM; KILL follows the grace.
	if _, errOut, code := run("exec", "-d", "--name", "stubborn", id, "--", "sh", "-c", "trap '' TERM; sleep 300"); code != 0 {
		t.Fatalf("exec -d: %d %s", code, errOut)
	}
	// The leader ignores TERM once its sleep runs (the trap comes first).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if out, _, _ := run("exec", id, "--", "sh", "-c", "pgrep -x sleep || echo none"); out != "none\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stubborn session's sleep did not start")
		}
	}
	if out, errOut, code := run("kill", "--grace", "200ms", id, "stubborn"); code != 0 || out != "stubborn killed SIGKILL\n" {
		t.Fatalf("kill: %d %q %s", code, out, errOut)
	}
	if out, _, _ := run("exec", id, "--", "sh", "-c", "pgrep -x sleep || echo none"); out != "none\n" {
		t.Fatalf("after kill: %q", out)
	}
	// exec -i streams through the daemon too: more than the 4 MiB a
	// request body once carried, to its end of input.
	data := bytes.Repeat([]byte("0123456789abcdef"), 512<<10)
	sum := sha256.Sum256(data)
	piped := exec.Command(buildCLI(t), "exec", host, "-i", id, "--", "sha256sum")
	piped.Stdin = bytes.NewReader(data)
	if got, err := piped.Output(); err != nil || !strings.HasPrefix(string(got), hex.EncodeToString(sum[:])) {
		t.Fatalf("exec -i of 8 MiB: %v %q", err, got)
	}
	// watch: a change made by another command shows as it happens.
	w := exec.Command(buildCLI(t), "watch", host, id, ".")
	var wout, werr testutil.SyncBuffer
	w.Stdout, w.Stderr = &wout, &werr
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Process.Kill(); _ = w.Wait() }()
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(werr.String(), "watching") && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if _, errOut, code := run("exec", id, "--", "sh", "-c", "echo x > watched.txt"); code != 0 {
		t.Fatalf("exec: %s", errOut)
	}
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(wout.String(), "write watched.txt"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("watch printed %q (stderr %q)", wout.String(), werr.String())
		}
	}
	// A name the sandbox made to act on a terminal shows escaped.
	if _, errOut, code := run("exec", id, "--", "sh", "-c", `echo x > "$(printf 'a\033[2Jb')"`); code != 0 {
		t.Fatalf("exec: %s", errOut)
	}
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(wout.String(), `"a\x1b[2Jb"`); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) || strings.Contains(wout.String(), "\x1b") {
			t.Fatalf("watch printed %q (stderr %q)", wout.String(), werr.String())
		}
	}
	// Refusals are one line and 125: an unknown session.
	if _, errOut, code := run("attach", id, "nope"); code == 0 || !strings.Contains(errOut, "unknown_session") {
		t.Fatalf("attach to an unknown session: %d %s", code, errOut)
	}
}

// TestAgentWordsEscaped: what a sandbox's agent answers is the sandbox's
// word (a workload that took its agent over writes it), so a session's id
// and state, and a watch event's type, reach the terminal escaped, as its
// command and paths do. A daemon here relays such an agent.
func TestAgentWordsEscaped(t *testing.T) {
	const forged = "\x1b]0;owned\a\x1b[2J"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/agent/sessions"):
			json.NewEncoder(w).Encode(wire.SessionList{Sessions: []wire.Session{{ID: "sess_" + forged, State: forged, Command: "x"}}})
		case strings.HasSuffix(r.URL.Path, "/agent/watch"):
			for _, ev := range []wire.WatchEvent{{Type: wire.WatchReady}, {Type: forged, Path: "a"}} {
				json.NewEncoder(w).Encode(ev)
			}
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	for _, args := range [][]string{{"sessions", "--host", srv.URL, "sbx_1"}, {"watch", "--host", srv.URL, "sbx_1", "."}} {
		out, errOut, _ := cordon(t, args...)
		if strings.Contains(out+errOut, "\x1b") || !strings.Contains(out, `\x1b]0;owned\a\x1b[2J`) {
			t.Errorf("cordon %s: %q %q", args[0], out, errOut)
		}
	}
}

// TestSessionTimeouts: --timeout with exec -d ends the session when it
// passes, what its program left running in its group included, and says
// so (sessions, attach's 124); with -t, on a real terminal, it ends the
// terminal's program, through the daemon and through cordon run -it.
func TestSessionTimeouts(t *testing.T) {
	id, host, run := daemonSandbox(t)
	if _, errOut, code := run("exec", "-d", "--timeout", "500ms", "--name", "slow", id, "--", "sh", "-c", "echo started; sleep 60"); code != 0 {
		t.Fatalf("exec -d --timeout: %d %s", code, errOut)
	}
	if out, errOut, code := run("attach", id, "slow"); code != 124 || out != "started\n" || !strings.Contains(errOut, "timed out after 500ms") {
		t.Fatalf("attach to a session that timed out: %d %q %q", code, out, errOut)
	}
	// A server started in the background by a program that exits at once.
	out, errOut, code := run("exec", "-d", "--timeout", "1s", "--name", "server", id, "--", "sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $!")
	if code != 0 {
		t.Fatalf("exec -d --timeout: %d %s", code, errOut)
	}
	out, _, _ = run("attach", id, "server")
	pid := strings.TrimSpace(out)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if out, _, _ := run("exec", id, "--", "sh", "-c", "kill -0 "+pid+" 2>/dev/null && echo alive || echo gone"); out == "gone\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the session's server %q outlived its timeout", pid)
		}
	}
	if out, _, code := run("sessions", id); code != 0 || strings.Count(out, "timed out") != 2 {
		t.Fatalf("sessions: %d %s", code, out)
	}
	// No timeout: the session runs on.
	if _, errOut, code := run("exec", "-d", "--name", "free", id, "--", "sleep", "60"); code != 0 {
		t.Fatalf("exec -d: %d %s", code, errOut)
	}
	if _, errOut, code := run("exec", "-d", "--timeout", "-1s", id, "--", "true"); code != 2 || !strings.Contains(errOut, "timeout") {
		t.Fatalf("a negative --timeout: %d %s", code, errOut)
	}

	// On a terminal, through the daemon and without one.
	for _, args := range [][]string{{"exec", host, "-it", "--timeout", "2s", id, "--", "sh"}, {"run", "-it", "--timeout", "2s", "--", "sh"}} {
		p := startOnPTY(t, 24, 80, args...)
		p.typeAndWait("echo on-$((1+1))\r", "on-2")
		p.typeAndWait("sleep 60\r", "sleep 60")
		if code := p.exitCode(); code != 124 || !strings.Contains(p.screen(), "timed out after 2s") {
			t.Fatalf("cordon %s: exit %d:\n%s", args[0], code, p.screen())
		}
	}
	var list []wire.Session
	if out, _, _ := run("sessions", "-o", "json", id); json.Unmarshal([]byte(out), &list) != nil {
		t.Fatalf("sessions -o json: %s", out)
	}
	free := false
	for _, s := range list {
		if s.ID == "free" {
			free = s.State == wire.SessionRunning && s.TimeoutMs == 0
		}
	}
	if !free {
		t.Fatalf("the session without a timeout, in %+v", list)
	}
}
