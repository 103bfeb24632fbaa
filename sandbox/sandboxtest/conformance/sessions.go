package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/agent/wire"
)

// testSessions covers detached programs with retained output (feature
// "sessions").
func testSessions(t *testing.T, h *harness) {
	ctx := context.Background()
	h.addition(t, "sessions", "sessions")
	readAll := func(t *testing.T, id string, from int64, follow bool) (string, int64, bool) {
		t.Helper()
		var b strings.Builder
		next, done, err := h.c.SessionOutput(ctx, id, from, follow, func(stream string, off int64, data []byte) error {
			b.WriteString(stream[:3] + ":" + string(data) + "|")
			return nil
		})
		if err != nil {
			t.Fatalf("output of %s from %d: %v", id, from, err)
		}
		return b.String(), next, done
	}
	t.Run("OutlivesItsConnection", func(t *testing.T) {
		// Started by one client, which then goes; read and waited on by
		// another: the output is all there, interleaved as written.
		starter := client.New(h.Endpoint)
		s, err := starter.StartSession(ctx, wire.SessionRequest{ID: "detached-1", Command: "sh",
			Args: []string{"-c", "echo one; sleep 0.1; echo two >&2; sleep 0.2; echo three; exit 7"}})
		starter.Close()
		if err != nil {
			t.Fatal(err)
		}
		if s.ID != "detached-1" || s.State != wire.SessionRunning || s.Pid <= 1 {
			t.Fatalf("started: %+v", s)
		}
		got, next, done := readAll(t, s.ID, 0, true)
		if got != "std:one\n|std:two\n|std:three\n|" {
			t.Fatalf("followed output %q", got)
		}
		if !done || next != int64(len("one\ntwo\nthree\n")) {
			t.Fatalf("followed to %d, done %v", next, done)
		}
		w, err := h.c.WaitSession(ctx, s.ID, 10*time.Second)
		if err != nil || w.State != wire.SessionExited || w.ExitCode == nil || *w.ExitCode != 7 {
			t.Fatalf("wait: %+v %v", w, err)
		}
		// Stdout and stderr keep their names; a reader from the middle
		// starts there.
		mid, _, _ := readAll(t, s.ID, 4, false)
		if mid != "std:two\n|std:three\n|" {
			t.Fatalf("from offset 4: %q", mid)
		}
		var streams []string
		if _, _, err := h.c.SessionOutput(ctx, s.ID, 0, false, func(stream string, _ int64, _ []byte) error {
			streams = append(streams, stream)
			return nil
		}); err != nil || strings.Join(streams, ",") != "stdout,stderr,stdout" {
			t.Fatalf("streams %v %v", streams, err)
		}
		if err := h.c.ForgetSession(ctx, s.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := h.c.Session(ctx, s.ID); !isCode(err, http.StatusNotFound, wire.CodeUnknownSession) {
			t.Fatalf("a forgotten session: %v", err)
		}
	})
	t.Run("EvictionIsReported", func(t *testing.T) {
		s, err := h.c.StartSession(ctx, wire.SessionRequest{Command: "sh", RetainBytes: wire.MinRetainBytes,
			Args: []string{"-c", "i=0; while [ $i -lt 2000 ]; do echo line-$i; i=$((i+1)); done"}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.c.WaitSession(ctx, s.ID, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		// The output may still be draining from the pipes (the leader has
		// exited): wait until it has ended, reading from wherever what is
		// held begins.
		var ev *client.EvictedError
		for deadline, from := time.Now().Add(10*time.Second), int64(0); ; time.Sleep(20 * time.Millisecond) {
			_, done, err := h.c.SessionOutput(ctx, s.ID, from, false, func(string, int64, []byte) error { return nil })
			if errors.As(err, &ev) {
				from = ev.First
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			if done {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the session's output never ended")
			}
		}
		// Once it has, a read from the start is told where what is held
		// begins, and what is held from there is at most the bound, ending
		// with the last line.
		_, _, err = h.c.SessionOutput(ctx, s.ID, 0, false, func(string, int64, []byte) error { return nil })
		if !errors.As(err, &ev) || ev.First <= 0 {
			t.Fatalf("a read of evicted output once it ended: %v", err)
		}
		var b strings.Builder
		next, done, err := h.c.SessionOutput(ctx, s.ID, ev.First, false, func(_ string, _ int64, d []byte) error { b.Write(d); return nil })
		if err != nil || !done || !strings.HasSuffix(b.String(), "line-1999\n") || next-ev.First > wire.MinRetainBytes {
			t.Fatalf("from %d: %d bytes (done %v, %v), ends %q", ev.First, next-ev.First, done, err, b.String()[max(0, b.Len()-20):])
		}
		_ = h.c.ForgetSession(ctx, s.ID)
	})
	t.Run("KillStopsTheGroup", func(t *testing.T) {
		s, err := h.c.StartSession(ctx, wire.SessionRequest{Command: "sh",
			Args: []string{"-c", "trap '' TERM; sleep 300 & echo $!; wait"}})
		if err != nil {
			t.Fatal(err)
		}
		var child string
		for deadline := time.Now().Add(10 * time.Second); child == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			out, _, _ := readAll(t, s.ID, 0, false)
			child = strings.TrimSuffix(strings.TrimPrefix(out, "std:"), "\n|")
		}
		if _, err := strconv.Atoi(child); err != nil {
			t.Fatalf("the session's child: %q", child)
		}
		// TERM is ignored by the leader: KILL follows the grace, and the
		// answer comes once the whole group is gone.
		k, err := h.c.KillSession(ctx, s.ID, "TERM", 200*time.Millisecond)
		if err != nil || k.State != wire.SessionExited || k.Signal != "SIGKILL" {
			t.Fatalf("kill: %+v %v", k, err)
		}
		if out := h.sh(t, "kill -0 "+child+" 2>/dev/null && echo alive || echo gone"); out != "gone\n" {
			t.Fatalf("the session's child after kill: %s", out)
		}
		_ = h.c.ForgetSession(ctx, s.ID)
	})
	t.Run("SurvivesOtherCommands", func(t *testing.T) {
		// A command that times out, whose orphans the agent sweeps, leaves
		// the sandbox's sessions alone. (The session sleeps for longer
		// than all this may take, a minute and more under emulation.)
		s, err := h.c.StartSession(ctx, wire.SessionRequest{Command: "sleep", Args: []string{"600"}})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			_, _ = h.c.KillSession(ctx, s.ID, "KILL", 0)
			_ = h.c.ForgetSession(ctx, s.ID)
		}()
		r := h.execute(t, map[string]any{"command": "sh", "args": []string{"-c", "setsid sleep 300 & sleep 300"}, "timeoutMs": 300})
		if r.result == nil || !r.result.TimedOut {
			t.Fatalf("the timed-out command: %+v", r.result)
		}
		if got, err := h.c.Session(ctx, s.ID); err != nil || got.State != wire.SessionRunning || !h.alive(t, strconv.Itoa(got.Pid)) {
			t.Fatalf("the session after another command's sweep: %+v %v", got, err)
		}
	})
	t.Run("Refusals", func(t *testing.T) {
		s, err := h.c.StartSession(ctx, wire.SessionRequest{ID: "dup", Command: "sleep", Args: []string{"30"}})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			_, _ = h.c.KillSession(ctx, s.ID, "KILL", 0)
			_ = h.c.ForgetSession(ctx, s.ID)
		}()
		for _, c := range []struct {
			req    wire.SessionRequest
			status int
			code   string
		}{
			{wire.SessionRequest{ID: "dup", Command: "true"}, http.StatusConflict, wire.CodeSessionExists},
			{wire.SessionRequest{ID: "bad id", Command: "true"}, http.StatusBadRequest, wire.CodeInvalidSessionID},
			{wire.SessionRequest{Command: ""}, http.StatusBadRequest, wire.CodeMissingCommand},
			{wire.SessionRequest{Command: "true", RetainBytes: 1}, http.StatusBadRequest, wire.CodeInvalidRetainBytes},
			{wire.SessionRequest{Command: "true", Cwd: "../../etc"}, http.StatusBadRequest, wire.CodeInvalidCwd},
			{wire.SessionRequest{Command: "no-such-program-here"}, http.StatusBadRequest, wire.CodeInvalidBody},
		} {
			if _, err := h.c.StartSession(ctx, c.req); !isCode(err, c.status, c.code) {
				t.Errorf("%+v: %v, want %d %s", c.req, err, c.status, c.code)
			}
		}
		// A field a session does not take is refused, naming it, not
		// ignored: "terminal" for tty ran a session with no terminal, and
		// "timeout" for timeoutMs would run one with no timeout.
		for body, says := range map[string]string{`{"command":"cat","terminal":true}`: "unknown field", `{"command":"sleep","args":["30"],"timeout":1000}`: "unknown field",
			`{"command":"true"} {"command":"true"}`: "more follows"} {
			r := h.raw(t, http.MethodPost, wire.RouteSessions, h.Endpoint.Token, []byte(body))
			if m := wantError(t, r, http.StatusBadRequest, wire.CodeInvalidBody); !strings.Contains(fmt.Sprint(m["message"]), says) {
				t.Errorf("%s: %s", body, r.body)
			}
		}
		if err := h.c.ForgetSession(ctx, "dup"); !isCode(err, http.StatusConflict, wire.CodeSessionRunning) {
			t.Errorf("forget a running session: %v", err)
		}
		if _, err := h.c.KillSession(ctx, "dup", "STOPIT", 0); !isCode(err, http.StatusBadRequest, wire.CodeInvalidSignal) {
			t.Errorf("an unknown signal: %v", err)
		}
		if _, _, err := h.c.SessionOutput(ctx, "dup", 1<<40, false, func(string, int64, []byte) error { return nil }); !isCode(err, http.StatusBadRequest, wire.CodeInvalidOffset) {
			t.Errorf("an offset past the end: %v", err)
		}
		if _, err := h.c.Session(ctx, "nope"); !isCode(err, http.StatusNotFound, wire.CodeUnknownSession) {
			t.Errorf("an unknown session: %v", err)
		}
		// The list has it, running.
		list, err := h.c.Sessions(ctx)
		if err != nil || !bytes.Contains([]byte(sessionIDs(list)), []byte("dup:running")) {
			t.Errorf("list: %v %v", sessionIDs(list), err)
		}
	})
}

func sessionIDs(l []wire.Session) string {
	var b strings.Builder
	for _, s := range l {
		b.WriteString(s.ID + ":" + s.State + " ")
	}
	return b.String()
}

func isCode(err error, status int, code string) bool {
	var e *client.Error
	return errors.As(err, &e) && e.Status == status && e.Code == code
}

// testTerminalNobodyReads: typing into a terminal whose program reads
// nothing fills its input queue; the agent then gives up at its deadline
// (409 stdio_delivery_unknown, with what the terminal took) rather than
// hold the request, and the session and the agent still answer.
func testTerminalNobodyReads(t *testing.T, h *harness, start Factory) {
	ctx := context.Background()
	h.addition(t, "terminals", "terminals")
	tg := start(t, Settings{"CANCEL_CONFIRM_TIMEOUT_MS": "300"})
	c := client.New(tg.Endpoint)
	defer c.Close()
	s, err := c.StartSession(ctx, wire.SessionRequest{Command: "sleep", Args: []string{"60"}, TTY: true})
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Repeat([]byte("xxxxxxxxx\n"), 400)
	refused := false
	for i := 0; i < 100 && !refused; i++ {
		rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		err := c.SessionInput(rctx, s.ID, lines)
		hung := rctx.Err() != nil
		cancel()
		switch {
		case hung:
			t.Fatalf("input %d into a terminal nobody reads hung past 15s", i)
		case isCode(err, http.StatusConflict, wire.CodeStdioDeliveryUnknown):
			refused = true
		case err != nil:
			t.Fatalf("input %d: %v", i, err)
		}
	}
	if !refused {
		t.Fatal("400 KB typed into a terminal nobody reads were all taken")
	}
	if _, err := c.Health(ctx); err != nil {
		t.Fatalf("the agent after: %v", err)
	}
	if _, err := c.KillSession(ctx, s.ID, "KILL", 0); err != nil {
		t.Fatalf("the session after: %v", err)
	}
}

// testTerminals covers sessions on a terminal (feature "terminals"): typed
// input, sizes, Ctrl-C reaching the foreground job, the exit status.
func testTerminals(t *testing.T, h *harness) {
	ctx := context.Background()
	h.addition(t, "terminals", "terminals")
	s, err := h.c.StartSession(ctx, wire.SessionRequest{Command: "sh", TTY: true, Rows: 30, Cols: 100, Env: map[string]string{"PS1": "$ "}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_, _ = h.c.KillSession(ctx, s.ID, "KILL", 0)
		_ = h.c.ForgetSession(ctx, s.ID)
	}()
	if !s.TTY {
		t.Fatalf("started: %+v", s)
	}
	// The output so far, read afresh each time (all of it is held).
	screen := func() string {
		var b strings.Builder
		_, _, _ = h.c.SessionOutput(ctx, s.ID, 0, false, func(stream string, _ int64, d []byte) error {
			if stream != "stdout" {
				t.Errorf("terminal output on %s", stream)
			}
			b.Write(d)
			return nil
		})
		return b.String()
	}
	typeAndWait := func(input, want string) {
		t.Helper()
		if err := h.c.SessionInput(ctx, s.ID, []byte(input)); err != nil {
			t.Fatal(err)
		}
		if !eventually(10*time.Second, func() bool { return strings.Contains(screen(), want) }) {
			t.Fatalf("typed %q, never saw %q in:\n%s", input, want, screen())
		}
	}
	typeAndWait("echo $((6*7))x\n", "42x")
	// Keys as a person types them, one request each: a space or Enter
	// alone is a key like any other, and an empty request types nothing.
	for _, key := range []string{"echo", " ", "", "ab", " ", "cd", "\r"} {
		if err := h.c.SessionInput(ctx, s.ID, []byte(key)); err != nil {
			t.Fatal(err)
		}
	}
	if !eventually(10*time.Second, func() bool { return strings.Contains(screen(), "\nab cd\r") }) || strings.Contains(screen(), "{}") {
		t.Fatalf("typed key by key, the line came out as:\n%q", screen())
	}
	typeAndWait("stty size; tty\n", "/dev/pts/")
	if !strings.Contains(screen(), "30 100") {
		t.Errorf("the size asked for is not the terminal's:\n%s", screen())
	}
	if err := h.c.ResizeSession(ctx, s.ID, 40, 120); err != nil {
		t.Fatal(err)
	}
	typeAndWait("stty size\n", "40 120")
	// Ctrl-C reaches the foreground job, not the shell.
	if err := h.c.SessionInput(ctx, s.ID, []byte("sleep 30.4321; echo slept\n")); err != nil {
		t.Fatal(err)
	}
	// Once sleep is the foreground job (the pattern's brackets keep it
	// from matching the command line of the shell that looks).
	if !eventually(10*time.Second, func() bool {
		return h.sh(t, "pgrep -f 'sleep 30[.]4321' >/dev/null && echo yes || echo no") == "yes\n"
	}) {
		t.Fatal("the foreground job never started")
	}
	typeAndWait("\x03echo after-$?\n", "after-130")
	// (The terminal echoes the typed line, "echo slept" with it: the
	// job's own output would be a line of its own.)
	if strings.Contains(screen(), "\nslept\r\n") {
		t.Fatal("the interrupted job went on")
	}
	typeAndWait("exit 3\n", "exit 3")
	w, err := h.c.WaitSession(ctx, s.ID, 10*time.Second)
	if err != nil || w.State != wire.SessionExited || w.ExitCode == nil || *w.ExitCode != 3 {
		t.Fatalf("wait: %+v %v", w, err)
	}
	// A session with neither a terminal nor a standard input of its own
	// takes no input; sizes are bounded.
	plain, err := h.c.StartSession(ctx, wire.SessionRequest{Command: "sleep", Args: []string{"30"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.c.SessionInput(ctx, plain.ID, []byte("x")); !isCode(err, http.StatusConflict, wire.CodeNoStdin) {
		t.Errorf("input to a session without a terminal or stdin: %v", err)
	}
	_, _ = h.c.KillSession(ctx, plain.ID, "KILL", 0)
	_ = h.c.ForgetSession(ctx, plain.ID)
	if _, err := h.c.StartSession(ctx, wire.SessionRequest{Command: "sh", TTY: true, Rows: 5000}); !isCode(err, http.StatusBadRequest, wire.CodeInvalidSize) {
		t.Errorf("a 5000-row terminal: %v", err)
	}
	if _, err := h.c.StartSession(ctx, wire.SessionRequest{Command: "sh", TTY: true, Stdin: true}); !isCode(err, http.StatusBadRequest, wire.CodeInvalidBody) {
		t.Errorf("stdin with a terminal: %v", err)
	}
}

// testSessionStdin: a session without a terminal given a standard input of
// its own (feature "session-stdin") reads what is written to it, in
// order, and its end once closed; then, and once the session has exited,
// input is refused.
func testSessionStdin(t *testing.T, h *harness) {
	ctx := context.Background()
	h.addition(t, "sessions", "session-stdin")
	s, err := h.c.StartSession(ctx, wire.SessionRequest{Command: "sh", Args: []string{"-c", "while read l; do echo got:$l; done; echo end"}, Stdin: true})
	if err != nil || !s.Stdin {
		t.Fatalf("start: %+v %v", s, err)
	}
	if err := h.c.SessionInput(ctx, s.ID, []byte("one\ntw")); err != nil {
		t.Fatal(err)
	}
	if err := h.c.SessionInput(ctx, s.ID, []byte("o\n")); err != nil {
		t.Fatal(err)
	}
	if err := h.c.CloseSessionStdin(ctx, s.ID, []byte("three\n")); err != nil {
		t.Fatal(err)
	}
	w, err := h.c.WaitSession(ctx, s.ID, 10*time.Second)
	if err != nil || w.State != wire.SessionExited || w.ExitCode == nil || *w.ExitCode != 0 || w.Stdin {
		t.Fatalf("wait: %+v %v", w, err)
	}
	// Followed to its end: what the program wrote last may still be on
	// its way from its pipes when it has exited.
	var out strings.Builder
	if _, _, err := h.c.SessionOutput(ctx, s.ID, 0, true, func(_ string, _ int64, b []byte) error { out.Write(b); return nil }); err != nil {
		t.Fatal(err)
	}
	if out.String() != "got:one\ngot:two\ngot:three\nend\n" {
		t.Fatalf("the program read: %q", out.String())
	}
	if err := h.c.SessionInput(ctx, s.ID, []byte("x")); !isCode(err, http.StatusConflict, wire.CodeStdioNotRunning) {
		t.Errorf("input once it exited: %v", err)
	}
	// Closed while the program runs: it reads the end; more is refused.
	open, err := h.c.StartSession(ctx, wire.SessionRequest{Command: "sh", Args: []string{"-c", "cat >/dev/null; sleep 30"}, Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.c.CloseSessionStdin(ctx, open.ID, nil); err != nil {
		t.Fatal(err)
	}
	if err := h.c.SessionInput(ctx, open.ID, []byte("x")); !isCode(err, http.StatusConflict, wire.CodeNoStdin) {
		t.Errorf("input once closed: %v", err)
	}
	_, _ = h.c.KillSession(ctx, open.ID, "KILL", 0)
	_ = h.c.ForgetSession(ctx, open.ID)
	_ = h.c.ForgetSession(ctx, s.ID)
	// A terminal's input has no end to close; the refusal says what to
	// type instead, as text.
	term, err := h.c.StartSession(ctx, wire.SessionRequest{Command: "sleep", Args: []string{"600"}, TTY: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.c.CloseSessionStdin(ctx, term.ID, nil); !isCode(err, http.StatusBadRequest, wire.CodeInvalidBody) || strings.ContainsRune(err.Error(), 4) || !strings.Contains(err.Error(), `\x04`) {
		t.Errorf("an end to a terminal's input: %q", err)
	}
	_, _ = h.c.KillSession(ctx, term.ID, "KILL", 0)
	_ = h.c.ForgetSession(ctx, term.ID)
}

// testBootIDHeader: every authenticated answer, a stream's head included,
// names the agent's start; the same id as its health says.
func testBootIDHeader(t *testing.T, h *harness) {
	ctx := context.Background()
	h.addition(t, "boot id", "boot-id-header")
	hl, err := h.c.Admit(ctx)
	if err != nil || hl.BootID == "" {
		t.Fatalf("health: %+v %v", hl, err)
	}
	for _, r := range []*response{
		h.post(t, wire.RouteReserve, map[string]any{}),
		h.raw(t, http.MethodGet, wire.RouteSessions, h.Endpoint.Token, nil),
		h.raw(t, http.MethodGet, "/no-such-route", h.Endpoint.Token, nil),
	} {
		if got := r.header.Get(wire.BootIDHeader); got != hl.BootID {
			t.Errorf("answer %d: boot id %q, want %q", r.status, got, hl.BootID)
		}
	}
	// Without the token, nothing of the agent shows.
	if got := h.raw(t, http.MethodGet, wire.RouteSessions, "", nil).header.Get(wire.BootIDHeader); got != "" {
		t.Errorf("an unauthenticated answer names the boot id %q", got)
	}
}

// testRetainedOutput covers executions whose output outlives their
// connection (feature "retained-output").
func testRetainedOutput(t *testing.T, h *harness) {
	ctx := context.Background()
	if !h.c.HasFeature(ctx, "retained-output") {
		if h.Reference {
			t.Skip("cordon addition: the reference worker keeps no output")
		}
		t.Fatal("cordon-agent does not advertise retained-output")
	}
	// Started on a connection that goes away at once: the command runs
	// on, and another connection reads its whole output and its result.
	id := h.reserve(t)
	sctx, drop := context.WithCancel(ctx)
	started := h.openStream(t, sctx, map[string]any{"executionId": id, "command": "sh", "args": []string{"-c", "echo a; sleep 0.5; echo b >&2; exit 6"}, "retainOutput": true})
	<-started
	drop()
	var got strings.Builder
	next, res, err := h.c.ExecutionOutput(ctx, id, 0, true, func(stream string, _ int64, d []byte) error {
		got.WriteString(stream[:3] + ":" + string(d))
		return nil
	})
	if err != nil || got.String() != "std:a\nstd:b\n" || next != 4 || res == nil || res.ExitCode != 6 {
		t.Fatalf("read back: %q to %d, result %+v, %v", got.String(), next, res, err)
	}
	// From the middle, on a third connection.
	got.Reset()
	if _, _, err := h.c.ExecutionOutput(ctx, id, 2, false, func(stream string, _ int64, d []byte) error { got.Write(d); return nil }); err != nil || got.String() != "b\n" {
		t.Fatalf("from 2: %q %v", got.String(), err)
	}
	// Asking without an id to read it back by is refused; so is an id
	// whose output is not kept.
	wantError(t, h.post(t, wire.RouteExecute, map[string]any{"command": "true", "retainOutput": true}), 400, wire.CodeInvalidBody)
	if _, _, err := h.c.ExecutionOutput(ctx, "exec_00000000-0000-0000-0000-000000000000", 0, false, func(string, int64, []byte) error { return nil }); !isCode(err, http.StatusNotFound, wire.CodeUnknownExecution) {
		t.Errorf("an unknown execution: %v", err)
	}
}

// testSessionTimeout: a session given a timeout (feature
// "session-timeout") has its process group ended once it passes, as a
// command's is, and says so; so has a group whose leader exited first,
// leaving a program running. One that ends in time is left alone, and a
// timeout out of range is refused.
func testSessionTimeout(t *testing.T, h *harness) {
	ctx := context.Background()
	h.addition(t, "session timeouts", "session-timeout")
	// The leader ignores TERM: KILL follows the grace.
	s, err := h.c.StartSession(ctx, wire.SessionRequest{Command: "sh", Args: []string{"-c", "trap '' TERM; sleep 300 & wait"}, TimeoutMs: 300})
	if err != nil || s.TimeoutMs != 300 {
		t.Fatalf("start: %+v %v", s, err)
	}
	w, err := h.c.WaitSession(ctx, s.ID, 60*time.Second)
	if err != nil || w.State != wire.SessionExited || !w.TimedOut || w.Signal != "SIGKILL" {
		t.Fatalf("a session past its timeout: %+v %v", w, err)
	}
	_ = h.c.ForgetSession(ctx, s.ID)

	// The leader starts a server and exits; the server is ended at the
	// timeout all the same.
	s, err = h.c.StartSession(ctx, wire.SessionRequest{Command: "sh", Args: []string{"-c", "sleep 300 >/dev/null 2>&1 & echo $!"}, TimeoutMs: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if w, err := h.c.WaitSession(ctx, s.ID, 60*time.Second); err != nil || w.ExitCode == nil || *w.ExitCode != 0 || w.TimedOut {
		t.Fatalf("the leader's own exit: %+v %v", w, err)
	}
	// Followed to its end: the leader's exit may come before the agent
	// has taken its last bytes from the pipe.
	var child strings.Builder
	if _, _, err := h.c.SessionOutput(ctx, s.ID, 0, true, func(_ string, _ int64, d []byte) error { child.Write(d); return nil }); err != nil {
		t.Fatal(err)
	}
	pid := strings.TrimSpace(child.String())
	if !h.alive(t, pid) {
		t.Fatalf("the server %q did not start", pid)
	}
	if !eventually(60*time.Second, func() bool { return !h.alive(t, pid) }) {
		t.Fatalf("the server %s outlived its session's timeout", pid)
	}
	if got, err := h.c.Session(ctx, s.ID); err != nil || !got.TimedOut {
		t.Fatalf("a session whose timeout ended its leftovers: %+v %v", got, err)
	}
	_ = h.c.ForgetSession(ctx, s.ID)

	// So is one whose session was forgotten first.
	s, err = h.c.StartSession(ctx, wire.SessionRequest{Command: "sh", Args: []string{"-c", "sleep 300 >/dev/null 2>&1 & echo $!"}, TimeoutMs: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.c.WaitSession(ctx, s.ID, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	child.Reset()
	if _, _, err := h.c.SessionOutput(ctx, s.ID, 0, true, func(_ string, _ int64, d []byte) error { child.Write(d); return nil }); err != nil {
		t.Fatal(err)
	}
	if err := h.c.ForgetSession(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	if pid := strings.TrimSpace(child.String()); !eventually(60*time.Second, func() bool { return !h.alive(t, pid) }) {
		t.Fatalf("the server %s of a forgotten session outlived its timeout", pid)
	}

	// In time: untouched.
	s, err = h.c.StartSession(ctx, wire.SessionRequest{Command: "true", TimeoutMs: 60000})
	if err != nil {
		t.Fatal(err)
	}
	if w, err := h.c.WaitSession(ctx, s.ID, 60*time.Second); err != nil || w.ExitCode == nil || *w.ExitCode != 0 || w.TimedOut {
		t.Fatalf("a session that ended in time: %+v %v", w, err)
	}
	_ = h.c.ForgetSession(ctx, s.ID)

	for _, v := range []string{"0", "-1", "1.5", `"1000"`, "2592000001", "9223372036854775807"} {
		r := h.raw(t, http.MethodPost, wire.RouteSessions, h.Endpoint.Token, []byte(`{"command":"true","timeoutMs":`+v+`}`))
		if m := wantError(t, r, http.StatusBadRequest, wire.CodeInvalidTimeout); !strings.Contains(fmt.Sprint(m["message"]), "timeoutMs") {
			t.Errorf("timeoutMs %s: %s", v, r.body)
		}
	}
}
