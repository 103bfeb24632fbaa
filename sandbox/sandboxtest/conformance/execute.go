package conformance

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/agent/wire"
)

func testExecute(t *testing.T, h *harness) {
	t.Run("OutputAndExitCode", func(t *testing.T) {
		r := h.execute(t, map[string]any{"command": "sh", "args": []string{"-c", "echo out; echo err >&2; exit 7"}})
		if r.status != 200 || r.result == nil {
			t.Fatalf("status %d result %v", r.status, r.result)
		}
		if r.stdout != "out\n" || r.stderr != "err\n" || r.result.ExitCode != 7 || r.result.TimedOut {
			t.Fatalf("stdout %q stderr %q result %+v", r.stdout, r.stderr, r.result)
		}
		if last := r.events[len(r.events)-1]; last.Type != wire.EventResult {
			t.Fatalf("last event %q, want result", last.Type)
		}
	})
	t.Run("Stdin", func(t *testing.T) {
		r := h.execute(t, map[string]any{"command": "cat", "stdin": "from stdin"})
		if r.stdout != "from stdin" {
			t.Fatalf("stdout %q", r.stdout)
		}
	})
	t.Run("BinaryStreams", func(t *testing.T) {
		if !h.c.HasFeature(context.Background(), "stdin-base64") {
			if h.Reference {
				t.Skip("cordon addition: the reference worker takes text stdin only")
			}
			t.Fatal("cordon-agent does not advertise stdin-base64")
		}
		// Every byte value, most of which are not UTF-8 on their own.
		var in strings.Builder
		for i := range 512 {
			in.WriteByte(byte(i))
		}
		stdin := in.String()
		var out strings.Builder
		res, err := h.c.Exec(context.Background(), "od", client.ExecOptions{Args: []string{"-An", "-v", "-tx1"}, Stdin: &stdin, Stdout: &out})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("od: %+v %v", res, err)
		}
		got := strings.Fields(out.String())
		if len(got) != len(stdin) {
			t.Fatalf("%d bytes arrived, want %d", len(got), len(stdin))
		}
		for i, x := range got {
			if want := fmt.Sprintf("%02x", stdin[i]); x != want {
				t.Fatalf("byte %d arrived as %s, want %s", i, x, want)
			}
		}
		for _, body := range []map[string]any{
			{"command": "cat", "stdin": "not base64!", "stdinEncoding": "base64"},
			{"command": "cat", "stdin": "aGk=", "stdinEncoding": "hex"},
			{"command": "cat", "stdin": "aGk=", "stdinEncoding": 64},
			{"command": "cat", "outputEncoding": "hex"},
			{"command": "cat", "outputEncoding": true},
		} {
			wantError(t, h.post(t, wire.RouteExecute, body), http.StatusBadRequest, wire.CodeInvalidBody)
		}
		if !h.c.HasFeature(context.Background(), "output-base64") {
			t.Fatal("cordon-agent does not advertise output-base64")
		}
		// The same bytes back, exactly, on both streams; then cut at a
		// limit that falls inside a character.
		for _, script := range []string{"cat", "cat >&2"} {
			var out, errOut strings.Builder
			res, err := h.c.Exec(context.Background(), "sh", client.ExecOptions{Args: []string{"-c", script}, Stdin: &stdin, Stdout: &out, Stderr: &errOut, RawOutput: true})
			got := out.String() + errOut.String()
			if err != nil || res.ExitCode != 0 || got != stdin {
				t.Fatalf("%s: %d bytes back, equal %v: %+v %v", script, len(got), got == stdin, res, err)
			}
		}
		euros := strings.Repeat("€", 10)
		var clipped strings.Builder
		res, err = h.c.Exec(context.Background(), "cat", client.ExecOptions{Stdin: &euros, Stdout: &clipped, RawOutput: true, MaxOutputBytes: 10})
		if err != nil || clipped.String() != euros[:10] || !res.StdoutTruncated {
			t.Fatalf("clipped at 10 bytes: %q %+v %v", clipped.String(), res, err)
		}
	})
	t.Run("UnreadStdin", func(t *testing.T) {
		// More stdin than a pipe holds, to a command that never reads it.
		r := h.execute(t, map[string]any{"command": "true", "stdin": strings.Repeat("x", 1<<20)})
		if r.result == nil || r.result.ExitCode != 0 {
			t.Fatalf("result %+v err %q", r.result, r.errMsg)
		}
	})
	t.Run("NoInheritedDescriptors", func(t *testing.T) {
		h.improvement(t, "commands get descriptors 0-2 only, whatever the agent inherited")
		// ls holds 3 open on the directory it lists.
		if out := h.sh(t, "ls /proc/self/fd"); strings.Fields(out) == nil || strings.Join(strings.Fields(out), " ") != "0 1 2 3" {
			t.Fatalf("open descriptors: %q", out)
		}
	})
	t.Run("EnvironmentIsScrubbed", func(t *testing.T) {
		r := h.execute(t, map[string]any{"command": "env", "env": map[string]string{"CALL_VAR": "v1"}})
		if !strings.Contains(r.stdout, "CALL_VAR=v1\n") {
			t.Fatalf("per-call env missing from %q", r.stdout)
		}
		if strings.Contains(r.stdout, h.EnvPrefix) || strings.Contains(r.stdout, h.Endpoint.Token) {
			t.Fatalf("agent configuration leaked into the command's environment:\n%s", r.stdout)
		}
	})
	t.Run("PerCallEnvMayUsePrefix", func(t *testing.T) {
		r := h.execute(t, map[string]any{"command": "sh", "args": []string{"-c", "echo $" + h.EnvPrefix + "X"}, "env": map[string]string{h.EnvPrefix + "X": "chosen"}})
		if r.stdout != "chosen\n" {
			t.Fatalf("stdout %q", r.stdout)
		}
	})
	t.Run("Cwd", func(t *testing.T) {
		out := h.sh(t, "pwd")
		ws := strings.TrimSpace(out)
		r := h.execute(t, map[string]any{"command": "pwd", "cwd": "sub/dir"})
		if strings.TrimSpace(r.stdout) != ws+"/sub/dir" {
			t.Fatalf("cwd sub/dir: pwd %q, workspace %q", r.stdout, ws)
		}
		r = h.execute(t, map[string]any{"command": "pwd", "cwd": ws + "/abs"})
		if strings.TrimSpace(r.stdout) != ws+"/abs" {
			t.Fatalf("absolute cwd: pwd %q", r.stdout)
		}
		for _, bad := range []string{"../..", "/etc", "a/../../x"} {
			r := h.execute(t, map[string]any{"command": "pwd", "cwd": bad})
			if r.status != 400 || !strings.Contains(string(r.body), wire.CodeInvalidCwd) {
				t.Errorf("cwd %q: %d %s, want 400 invalid_cwd", bad, r.status, r.body)
			}
		}
	})
	t.Run("TimeoutRefusedNotClamped", func(t *testing.T) {
		for _, v := range []any{0, -5, "abc", 1e12, nil} {
			r := h.execute(t, map[string]any{"command": "true", "timeoutMs": v})
			if r.status != 400 || !strings.Contains(string(r.body), wire.CodeInvalidTimeout) {
				t.Errorf("timeoutMs %v: %d %s, want 400 invalid_timeout", v, r.status, r.body)
			}
		}
	})
	t.Run("TimeoutStopsCommand", func(t *testing.T) {
		r := h.execute(t, map[string]any{"command": "sleep", "args": []string{"30"}, "timeoutMs": 300})
		if r.result == nil || !r.result.TimedOut || r.result.Signal != "SIGTERM" || r.result.ExitCode != -1 {
			t.Fatalf("result %+v, want timedOut with SIGTERM", r.result)
		}
	})
	t.Run("MissingCommand", func(t *testing.T) {
		for _, body := range []any{map[string]any{}, map[string]any{"command": 5}, map[string]any{"command": ""}} {
			wantError(t, h.post(t, "/execute", body), 400, wire.CodeMissingCommand)
		}
	})
	t.Run("InvalidBody", func(t *testing.T) {
		wantError(t, h.raw(t, "POST", "/execute", h.Endpoint.Token, []byte("{not json")), 400, wire.CodeInvalidBody)
	})
	t.Run("NoSuchProgram", func(t *testing.T) {
		r := h.execute(t, map[string]any{"command": "/nonexistent/program"})
		if r.status != 200 || r.errMsg == "" || r.result != nil {
			t.Fatalf("status %d err %q result %v, want a stream ending in an error event", r.status, r.errMsg, r.result)
		}
	})
	t.Run("Truncation", func(t *testing.T) {
		r := h.execute(t, map[string]any{"command": "sh", "args": []string{"-c", "printf 0123456789abcdef; printf ABCDEFGHIJ >&2"}, "maxOutputBytes": 10})
		if r.stdout != "0123456789" || !r.result.StdoutTruncated || r.stderr != "ABCDEFGHIJ" || r.result.StderrTruncated {
			t.Fatalf("stdout %q stderr %q result %+v", r.stdout, r.stderr, r.result)
		}
	})
	t.Run("LargeOutput", func(t *testing.T) {
		r := h.execute(t, map[string]any{"command": "sh", "args": []string{"-c", "i=0; while [ $i -lt 2000 ]; do echo 0123456789012345678901234567890123456789012345678901234567890123456789; i=$((i+1)); done"}})
		if len(r.stdout) != 2000*71 || r.result.ExitCode != 0 {
			t.Fatalf("got %d bytes, want %d", len(r.stdout), 2000*71)
		}
	})
	t.Run("UTF8NeverSplit", func(t *testing.T) {
		h.improvement(t, "a multi-byte character is never split across two deltas")
		// Write a 3-byte character one byte at a time, with pauses, so that
		// every read ends inside a character.
		script := `for i in 1 2 3 4 5; do printf '\342'; sleep 0.02; printf '\202'; sleep 0.02; printf '\254'; sleep 0.02; done`
		r := h.execute(t, map[string]any{"command": "sh", "args": []string{"-c", script}})
		if r.stdout != strings.Repeat("€", 5) {
			t.Fatalf("stdout %q, want five euro signs", r.stdout)
		}
		for _, ev := range r.events {
			if ev.Type == wire.EventStdout && (!utf8.ValidString(ev.Data) || strings.ContainsRune(ev.Data, utf8.RuneError)) {
				t.Fatalf("delta %q splits a character", ev.Data)
			}
		}
	})
	t.Run("ArgsAreNotAShell", func(t *testing.T) {
		r := h.execute(t, map[string]any{"command": "echo", "args": []string{"$HOME", "a;b", "`id`"}})
		if r.stdout != "$HOME a;b `id`\n" {
			t.Fatalf("stdout %q", r.stdout)
		}
	})
	t.Run("ConcurrentExecutions", func(t *testing.T) {
		type out struct {
			stdout string
			err    error
		}
		done := make(chan out, 8)
		for i := range 8 {
			go func() {
				var b strings.Builder
				_, err := h.c.Exec(context.Background(), "sh", client.ExecOptions{Args: []string{"-c", "sleep 0.2; echo " + string(rune('a'+i))}, Stdout: &b})
				done <- out{b.String(), err}
			}()
		}
		seen := map[string]bool{}
		for range 8 {
			o := <-done
			if o.err != nil {
				t.Fatal(o.err)
			}
			seen[o.stdout] = true
		}
		if len(seen) != 8 {
			t.Fatalf("outputs %v", seen)
		}
	})
}
