package server_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/agent/wire"
	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/sandbox"
	"github.com/cordon-sandbox/cordon/sandbox/sandboxtest"
	"github.com/cordon-sandbox/cordon/server"
	"github.com/cordon-sandbox/cordon/server/api"
	sclient "github.com/cordon-sandbox/cordon/server/client"
)

// The daemon's life cycles on a fake backend (sandboxtest.FakeBackend):
// real agents as unconfined children, no root, and failures on request.

// startFakeDaemon is startDaemon on a FakeBackend, which it returns too.
func startFakeDaemon(t testing.TB, tune ...func(*server.Config)) (*daemon, *sandboxtest.FakeBackend) {
	t.Helper()
	fake := sandboxtest.NewFake(sandboxtest.FakeConfig{AgentPath: testutil.BuildAgent(t), StateDir: t.TempDir(), Limits: true})
	t.Cleanup(func() {
		// What the last daemon's Close left (nothing, if it did its job).
		if err := fake.Sweep(context.Background(), nil); err != nil {
			t.Errorf("fake backend: %v", err)
		}
	})
	d := &daemon{backend: &testBackend{Backend: fake, insts: map[string]sandbox.Instance{}}, stateDir: t.TempDir(), hosts: t.TempDir()}
	return d.start(t, tune...), fake
}

// eventually polls cond (every 20 ms, for 15 s at most): for state the
// daemon reaches on its own clock (the reaper's ticks).
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
	}
}

// TestFakeStartFailures: a tier that cannot start a sandbox is a 503 with
// its code, the daemon keeps no record of it and leaves nothing running; a
// start that hangs ends with the caller's request and leaves nothing
// either; and once the tier recovers, creates work again.
func TestFakeStartFailures(t *testing.T) {
	d, fake := startFakeDaemon(t)
	c := d.local
	ctx := t.Context()
	fake.FailStarts(errors.Join(sandbox.ErrUnavailable, errors.New("the tier is down")))
	_, err := c.Create(ctx, api.CreateRequest{})
	wantCode(t, err, http.StatusServiceUnavailable, api.CodeUnavailable)

	fake.FailStarts(nil)
	fake.HangStarts(true)
	hctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = c.Create(hctx, api.CreateRequest{})
	cancel()
	if err == nil {
		t.Fatal("a create whose start hangs returned")
	}
	fake.HangStarts(false)
	eventually(t, "the hung create's request ended on the daemon", func() bool {
		return fake.Counts().StartCalls == 2
	})
	if sbs, err := c.List(ctx, sclient.ListOptions{}); err != nil || len(sbs) != 0 {
		t.Fatalf("after failed creates the daemon lists %v (%v)", sbs, err)
	}
	// Positive control: the same daemon creates once the tier is back.
	sb := create(t, c, api.CreateRequest{})
	if got := sh(t, c, sb.ID, "echo ok"); got != "ok\n" {
		t.Fatalf("exec: %q", got)
	}
	if n := fake.Counts(); n.Starts != 1 || n.Live != 1 {
		t.Fatalf("counts %+v, want one start, one live", n)
	}
}

// TestFakeTeardownRetried: a teardown that fails is not reported done: the
// delete answers the teardown error, the sandbox stays "destroying" (the
// error in its record), and the reaper retries until the tier confirms it.
func TestFakeTeardownRetried(t *testing.T) {
	d, fake := startFakeDaemon(t)
	c := d.local
	ctx := t.Context()
	sb, err := c.Create(ctx, api.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	fake.FailDestroys(errors.New("the runtime would not remove it"))
	err = c.Delete(ctx, sb.ID)
	wantCode(t, err, http.StatusInternalServerError, api.CodeTeardown)
	got, err := c.Get(ctx, sb.ID)
	if err != nil || got.State != api.StateDestroying {
		t.Fatalf("after a failed teardown: %+v %v", got, err)
	}
	if n := fake.Counts(); n.Live != 1 {
		t.Fatalf("counts %+v: the sandbox should still run", n)
	}
	calls := fake.Counts().DestroyCalls
	eventually(t, "the reaper retried the teardown", func() bool { return fake.Counts().DestroyCalls > calls })
	fake.FailDestroys(nil)
	eventually(t, "the retried teardown confirmed", func() bool {
		got, err := c.Get(ctx, sb.ID)
		return err == nil && got.State == api.StateDestroyed
	})
	if n := fake.Counts(); n.Live != 0 || n.Destroys != 1 {
		t.Fatalf("counts %+v, want one destroy and none live", n)
	}
}

// TestFakeRestart: a daemon that stops leaves its sandboxes running; the
// next takes back each recorded one that still answers, records the ones
// that died as lost, and tears down what no record explains.
func TestFakeRestart(t *testing.T) {
	d, fake := startFakeDaemon(t)
	c := d.local
	ctx := t.Context()
	kept, err := c.Create(ctx, api.CreateRequest{Labels: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	sh(t, c, kept.ID, "echo before > state")
	// A session started through this daemon lives in the sandbox's agent:
	// the next daemon reads its output from the start.
	sess, err := c.Agent(kept.ID).StartSession(ctx, wire.SessionRequest{Command: "sh", Args: []string{"-c", "echo from-before-the-restart; sleep 300"}})
	if err != nil {
		t.Fatal(err)
	}
	lostMark := newMark()
	lost, err := c.Create(ctx, api.CreateRequest{Spec: api.Spec{Env: map[string]string{markVar: lostMark}}})
	if err != nil {
		t.Fatal(err)
	}
	stray, err := sandbox.NewProvider([]sandbox.Backend{fake}).Create(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	d.stop(t, false)
	if n := fake.Counts(); n.Live != 3 {
		t.Fatalf("a stopped daemon left %d sandboxes running, want 3", n.Live)
	}
	if err := d.backend.instance(lostMark).(*sandboxtest.FakeInstance).Kill(ctx); err != nil {
		t.Fatal(err)
	}
	d.start(t)
	if got := sh(t, c, kept.ID, "cat state"); got != "before\n" {
		t.Fatalf("after the restart: %q", got)
	}
	var out strings.Builder
	if _, _, err := c.Agent(kept.ID).SessionOutput(ctx, sess.ID, 0, false, func(_ string, _ int64, d []byte) error { out.Write(d); return nil }); err != nil || out.String() != "from-before-the-restart\n" {
		t.Fatalf("the session's output after the restart: %q %v", out.String(), err)
	}
	if sb, err := c.Get(ctx, kept.ID); err != nil || sb.Labels["k"] != "v" || sb.State != api.StateRunning {
		t.Fatalf("kept: %+v %v", sb, err)
	}
	if sb, err := c.Get(ctx, lost.ID); err != nil || sb.State != api.StateDestroyed || sb.Reason != "lost" {
		t.Fatalf("lost: %+v %v", sb, err)
	}
	if _, err := stray.Exec(ctx, "true", sandbox.ExecOptions{}); err == nil {
		t.Fatal("an unrecorded sandbox survived the restart")
	}
	if n := fake.Counts(); n.Live != 1 {
		t.Fatalf("after the restart %d sandboxes run, want the 1 kept", n.Live)
	}
}

// TestFakeQuota: a tenant's sandbox quota holds under concurrent creates:
// exactly the quota succeed, the rest are 429, and nothing beyond it is
// ever started on the tier.
func TestFakeQuota(t *testing.T) {
	const quota = 3
	d, fake := startFakeDaemon(t, func(cfg *server.Config) { cfg.Limits.MaxSandboxesPerTenant = quota })
	c, _ := d.tenant(t, "acme")
	ctx := t.Context()
	var wg sync.WaitGroup
	errs := make([]error, 12)
	for i := range errs {
		wg.Go(func() {
			sb, err := c.Create(ctx, api.CreateRequest{})
			errs[i] = err
			if err == nil {
				t.Cleanup(func() { c.Delete(context.Background(), sb.ID) })
			}
		})
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		if err == nil {
			ok++
			continue
		}
		var e *api.Error
		if !errors.As(err, &e) || e.Status != http.StatusTooManyRequests || e.Code != api.CodeQuota {
			t.Errorf("a create beyond the quota: %v, want 429 %s", err, api.CodeQuota)
		}
	}
	if ok != quota || fake.Counts().StartCalls != quota {
		t.Fatalf("%d creates succeeded and %d were started, want %d", ok, fake.Counts().StartCalls, quota)
	}
}
