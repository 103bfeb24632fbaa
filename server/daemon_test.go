package server_test

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/sandbox"
	"github.com/cordon-sandbox/cordon/sandbox/sandboxtest"
	"github.com/cordon-sandbox/cordon/server"
	"github.com/cordon-sandbox/cordon/server/api"
	sclient "github.com/cordon-sandbox/cordon/server/client"
)

// TestRunDaemon: a daemon's whole life as cordon serve lives it, on the
// fake tier: it serves its socket until its context ends, then stops
// listening and leaves its sandboxes running, and the next daemon on the
// same state takes them back. A listener it cannot open (TCP without keys)
// is an error at start, naming the address.
func TestRunDaemon(t *testing.T) {
	fake := sandboxtest.NewFake(sandboxtest.FakeConfig{AgentPath: testutil.BuildAgent(t), StateDir: t.TempDir()})
	t.Cleanup(func() { _ = fake.Sweep(context.Background(), nil) })
	state, sock := t.TempDir(), filepath.Join(t.TempDir(), "cordon.sock")
	run := func(listen ...string) (stop func() error) {
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			done <- server.RunDaemon(ctx, server.DaemonConfig{
				Server:   server.Config{Provider: sandbox.NewProvider([]sandbox.Backend{fake}), StateDir: state},
				Listen:   listen,
				Backends: []sandbox.Backend{fake},
			})
		}()
		return func() error { cancel(); return <-done }
	}
	client := func() *sclient.Client {
		c, err := sclient.New("unix://"+sock, "")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// The daemon answers once it listens: wait for the socket.
	waitUp := func() {
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if c, err := net.Dial("unix", sock); err == nil {
				c.Close()
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("the daemon never listened")
			}
		}
	}
	stop := run("unix://" + sock)
	waitUp()
	sb, err := client().Create(t.Context(), api.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatalf("a daemon told to stop: %v", err)
	}
	if _, err := net.Dial("unix", sock); err == nil {
		t.Fatal("the stopped daemon still answers")
	}
	if n := fake.Counts(); n.Live != 1 {
		t.Fatalf("%d sandboxes run after the daemon stopped, want the 1 it had", n.Live)
	}
	stop = run("unix://" + sock)
	waitUp()
	var out strings.Builder
	if res, err := client().Exec(t.Context(), sb.ID, "echo", sclient.ExecOptions{Args: []string{"back"}, Stdout: &out}); err != nil || res.ExitCode != 0 || out.String() != "back\n" {
		t.Fatalf("the next daemon's exec in the kept sandbox: %q %+v %v", out.String(), res, err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	err = server.RunDaemon(t.Context(), server.DaemonConfig{
		Server: server.Config{Provider: sandbox.NewProvider([]sandbox.Backend{fake}), StateDir: t.TempDir()},
		Listen: []string{"tcp://127.0.0.1:0"},
	})
	if err == nil || !strings.Contains(err.Error(), "tcp://127.0.0.1:0") || !strings.Contains(err.Error(), "API keys") {
		t.Fatalf("a TCP listener without keys: %v", err)
	}
}
