package main

import (
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/agent/wire"
)

// TestExitFor: the exit status of each way a command ends, and what cordon
// says of it on stderr (a timeout left to the agent's default names it).
func TestExitFor(t *testing.T) {
	for _, c := range []struct {
		res     wire.Result
		timeout time.Duration
		code    int
		says    []string
	}{
		{wire.Result{ExitCode: 3}, 0, 3, nil},
		{wire.Result{TimedOut: true}, 0, exitTimeout, []string{"timed out after 5m0s"}},
		{wire.Result{TimedOut: true}, 2 * time.Second, exitTimeout, []string{"timed out after 2s"}},
		{wire.Result{ExitCode: -1, Signal: "SIGKILL"}, 0, 137, []string{"killed by SIGKILL"}},
		{wire.Result{StdoutTruncated: true, StderrTruncated: true}, 0, 0, []string{"stdout was cut", "stderr was cut"}},
		{wire.Result{ExitCode: -1, Signal: "SIGKILL", OOMKills: 1}, 0, exitOOM, []string{"ran out of memory (--memory 64m)"}},
		{wire.Result{ExitCode: 0, OOMKills: 2}, 0, 0, []string{"2 of the command's processes killed: the sandbox ran out of memory"}},
	} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		stderr := os.Stderr
		os.Stderr = w
		code := exitFor(&c.res, c.timeout, 64<<20)
		os.Stderr = stderr
		w.Close()
		said, _ := io.ReadAll(r)
		r.Close()
		if code != c.code {
			t.Errorf("%+v: exit %d, want %d", c.res, code, c.code)
		}
		for _, s := range c.says {
			if !strings.Contains(string(said), s) {
				t.Errorf("%+v: said %q, not %q", c.res, said, s)
			}
		}
		if c.says == nil && len(said) > 0 {
			t.Errorf("%+v: said %q", c.res, said)
		}
	}
}
