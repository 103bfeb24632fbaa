package server_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/server"
	"github.com/cordon-sandbox/cordon/server/api"
	sclient "github.com/cordon-sandbox/cordon/server/client"
)

// TestSandboxLifetime: with a --max-ttl and no default, a create that asks
// for no TTL gets the maximum (it lived forever); PATCH moves a TTL,
// counted from now, in the range a create takes, and an idle timeout; a
// TTL extended keeps the sandbox past its first end, one cut short ends
// it (reaped for its TTL); the change survives a restart, says so in an
// event, and is the owner's alone.
func TestSandboxLifetime(t *testing.T) {
	tune := func(c *server.Config) { c.MaxTTL = time.Hour }
	d := startDaemon(t, tune)
	alice, aliceKey := d.tenant(t, "alice")
	bob, _ := d.tenant(t, "bob")
	ctx := t.Context()
	// (Both go with the daemon at the test's end: its port changes with the
	// restart below.)
	sb, err := alice.Create(ctx, api.CreateRequest{})
	if err != nil || sb.ExpiresAt == nil || time.Until(*sb.ExpiresAt) < 59*time.Minute || time.Until(*sb.ExpiresAt) > time.Hour {
		t.Fatalf("no TTL asked, under a maximum of 1h: %+v %v", sb, err)
	}
	ectx, events := subscribe(t, alice)
	short, err := alice.Create(ctx, api.CreateRequest{TTLSeconds: 2, IdleTimeoutSeconds: -1})
	if err != nil {
		t.Fatal(err)
	}
	got, err := alice.Update(ctx, short.ID, api.UpdateRequest{TTLSeconds: new(int64(3600)), IdleTimeoutSeconds: new(int64(600))})
	if err != nil || got.ExpiresAt == nil || time.Until(*got.ExpiresAt) < 59*time.Minute || got.IdleTimeout != 600 {
		t.Fatalf("extended: %+v %v", got, err)
	}
	if ev := waitEvent(t, ectx, events, api.EventUpdated, short.ID); ev.Data["idleTimeoutSeconds"] != float64(600) || ev.Data["expiresAt"] == nil {
		t.Errorf("the updated event: %+v", ev)
	}
	// Refusals: out of range, nothing to change, not the caller's.
	for _, req := range []string{`{"ttlSeconds": 3601}`, `{"ttlSeconds": -1}`, `{"ttlSeconds": 9300000000}`, `{"idleTimeoutSeconds": 1e12}`, `{}`, `{"labels": {}}`, `null`} {
		hreq, _ := http.NewRequest("PATCH", "http://"+d.tcp+"/v1/sandboxes/"+short.ID, strings.NewReader(req))
		hreq.Header.Set("Authorization", "Bearer "+aliceKey)
		resp, err := http.DefaultClient.Do(hreq)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Errorf("PATCH %s: %d %s", req, resp.StatusCode, body)
		}
	}
	_, err = bob.Update(ctx, short.ID, api.UpdateRequest{TTLSeconds: new(int64(1))})
	wantCode(t, err, http.StatusNotFound, api.CodeNotFound)
	// Past its first end, it lives on; across a restart, its new end holds.
	time.Sleep(3 * time.Second)
	d.stop(t, false)
	d.start(t, tune)
	if alice, err = sclient.New("http://"+d.tcp, aliceKey); err != nil {
		t.Fatal(err)
	}
	if got, err := alice.Get(ctx, short.ID); err != nil || got.State != api.StateRunning || got.ExpiresAt == nil || time.Until(*got.ExpiresAt) < 58*time.Minute || got.IdleTimeout != 600 {
		t.Fatalf("after its first end and a restart: %+v %v", got, err)
	}
	// Cut short, it ends, for its TTL.
	if _, err := alice.Update(ctx, short.ID, api.UpdateRequest{TTLSeconds: new(int64(1))}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "reaped for its new TTL", func() bool {
		got, err := alice.Get(ctx, short.ID)
		return err == nil && got.State == api.StateDestroyed && got.Reason == "ttl"
	})
}

// TestMetricsNotActivity: a dashboard that reads a sandbox's metrics over
// and over keeps no idle sandbox alive (neither the daemon nor the agent
// counts the reads as activity), and another tenant cannot read them.
func TestMetricsNotActivity(t *testing.T) {
	d := startDaemon(t)
	alice, _ := d.tenant(t, "alice")
	bob, _ := d.tenant(t, "bob")
	ctx := t.Context()
	sb, err := alice.Create(ctx, api.CreateRequest{IdleTimeoutSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = bob.Metrics(ctx, sb.ID)
	wantCode(t, err, http.StatusNotFound, api.CodeNotFound)
	_, err = bob.MetricsHistory(ctx, sb.ID, time.Time{}, time.Time{})
	wantCode(t, err, http.StatusNotFound, api.CodeNotFound)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err := alice.Metrics(ctx, sb.ID); err != nil {
			wantCode(t, err, http.StatusNotFound, api.CodeNotFound)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a sandbox whose metrics were read every 100 ms was never reaped for its idle timeout of 1 s")
		}
	}
	if got, err := alice.Get(ctx, sb.ID); err != nil || got.State != api.StateDestroyed || got.Reason != "idle" {
		t.Fatalf("%+v %v", got, err)
	}
}
