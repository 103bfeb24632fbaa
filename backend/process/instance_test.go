//go:build linux

package process

import (
	"errors"
	"os"
	"testing"

	"github.com/cordon-sandbox/cordon/agent/client"
)

// saidProc is a proc that only says something.
type saidProc struct{ said string }

func (p saidProc) Pid() int                  { return 1 }
func (p saidProc) Endpoint() client.Endpoint { return client.Endpoint{} }
func (p saidProc) Exited() <-chan struct{}   { return nil }
func (p saidProc) ExitCode() int             { return -1 }
func (p saidProc) Signal(os.Signal) error    { return nil }
func (p saidProc) Kill() error               { return nil }
func (p saidProc) Diagnostics() string       { return p.said }

// TestDiagnostics: an adopted sandbox (no readiness of this process's) says
// what its agent said; one whose commands could not be held apart says
// that first, once it is ready.
func TestDiagnostics(t *testing.T) {
	if d := (&instance{proc: saidProc{"agent log"}}).Diagnostics(); d != "agent log" {
		t.Errorf("adopted: %q", d)
	}
	r := &readiness{done: make(chan struct{})}
	i := &instance{proc: saidProc{"agent log"}, ready: r, holdErr: errors.New("no such cgroup")}
	if d := i.Diagnostics(); d != "agent log" {
		t.Errorf("before ready: %q", d)
	}
	close(r.done)
	if d := i.Diagnostics(); d != "holding the commands' pids apart: no such cgroup; agent log" {
		t.Errorf("after ready: %q", d)
	}
}
