package server_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/agent/wire"
	"github.com/cordon-sandbox/cordon/backend/oci"
	"github.com/cordon-sandbox/cordon/egress"
	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/sandbox"
	"github.com/cordon-sandbox/cordon/sandbox/sandboxtest/conformance"
	"github.com/cordon-sandbox/cordon/server"
	"github.com/cordon-sandbox/cordon/server/api"
	sclient "github.com/cordon-sandbox/cordon/server/client"
)

func TestConformanceThroughDaemon(t *testing.T) {
	d := startDaemon(t)
	c, key := d.tenant(t, "conformance")
	conformance.Run(t, d.conformanceFactory(c, key))
}

func TestLifecycleAndFiles(t *testing.T) {
	d := startDaemon(t)
	c := d.local
	ctx := t.Context()
	sb := create(t, c, api.CreateRequest{Labels: map[string]string{"team": "a"}, Spec: api.Spec{Env: map[string]string{"GREETING": "hi"}}})
	if sb.State != api.StateRunning || sb.Spec.Tier != "process" || sb.Tenant != server.LocalTenant {
		t.Fatalf("created: %+v", sb)
	}
	other := create(t, c, api.CreateRequest{Labels: map[string]string{"team": "b"}})
	if got := sh(t, c, sb.ID, "echo $GREETING; id -u; pwd"); got != "hi\n1000\n/workspace\n" {
		t.Fatalf("exec: %q", got)
	}
	list, err := c.List(ctx, sclient.ListOptions{Labels: map[string]string{"team": "a"}})
	if err != nil || len(list) != 1 || list[0].ID != sb.ID {
		t.Fatalf("list by label: %v %v", list, err)
	}
	if all, _ := c.List(ctx, sclient.ListOptions{State: api.StateRunning}); len(all) != 2 {
		t.Fatalf("list by state: %v", all)
	}

	// Files: raw upload and download with a range, stat, list, mkdir, remove.
	data := bytes.Repeat([]byte("0123456789"), 300_000)
	if err := c.Upload(ctx, sb.ID, "out/data.bin", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if n, err := c.Download(ctx, sb.ID, "out/data.bin", 0, 0, &got); err != nil || n != int64(len(data)) || !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("download: %d %v", n, err)
	}
	got.Reset()
	if _, err := c.Download(ctx, sb.ID, "out/data.bin", 5, 10, &got); err != nil || got.String() != "5678901234" {
		t.Fatalf("range: %q %v", got.String(), err)
	}
	if fi, err := c.Stat(ctx, sb.ID, "out/data.bin"); err != nil || fi.Size != int64(len(data)) || fi.Type != "file" {
		t.Fatalf("stat: %+v %v", fi, err)
	}
	if err := c.Mkdir(ctx, sb.ID, "out/sub/dir"); err != nil {
		t.Fatal(err)
	}
	if l, err := c.ListDir(ctx, sb.ID, "out"); err != nil || len(l.Entries) != 2 || l.Entries[0].Name != "data.bin" || l.Entries[1].Type != "dir" {
		t.Fatalf("list dir: %+v %v", l, err)
	}
	if fi, err := c.Rename(ctx, sb.ID, "out/data.bin", "out/sub/moved.bin"); err != nil || fi.Size != int64(len(data)) || !strings.HasSuffix(fi.Path, "/out/sub/moved.bin") {
		t.Fatalf("rename: %+v %v", fi, err)
	}
	if _, err := c.Rename(ctx, sb.ID, "out/sub/moved.bin", ""); err == nil || !strings.Contains(err.Error(), "the to query parameter") {
		t.Fatalf("rename with no to: %v", err)
	}
	if err := c.Remove(ctx, sb.ID, "out", true); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Stat(ctx, sb.ID, "out"); !sclient.IsNotFound(err) {
		t.Fatalf("stat after remove: %v", err)
	}
	if _, err := c.Download(ctx, sb.ID, "/etc/shadow", 0, 0, io.Discard); err == nil {
		t.Fatal("read outside the read roots")
	}

	// Network policy and pause.
	if s, err := c.SetNetworkPolicy(ctx, sb.ID, api.Egress{Rules: []egress.Rule{{Host: "example.test"}}}); err != nil || s.Spec.Egress == nil || len(s.Spec.Egress.Rules) != 1 {
		t.Fatalf("policy: %+v %v", s, err)
	}
	if _, err := c.SetNetworkPolicy(ctx, sb.ID, api.Egress{Mode: "sometimes"}); !sclient.Is(err, sclient.ErrInvalid) {
		t.Fatalf("bad policy: %v", err)
	}
	if sb.Pausable {
		if s, err := c.Pause(ctx, sb.ID); err != nil || s.State != api.StatePaused {
			t.Fatalf("pause: %+v %v", s, err)
		}
		_, err := c.Exec(ctx, sb.ID, "true", sclient.ExecOptions{})
		wantCode(t, err, http.StatusConflict, api.CodePaused)
		if s, err := c.Resume(ctx, sb.ID); err != nil || s.State != api.StateRunning {
			t.Fatalf("resume: %+v %v", s, err)
		}
		sh(t, c, sb.ID, "true")
	}

	// Delete is confirmed and idempotent; the id is then unknown to work.
	if err := c.Delete(ctx, other.ID); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, other.ID); err != nil {
		t.Fatalf("second delete: %v", err)
	}
	if got, err := c.Get(ctx, other.ID); err != nil || got.State != api.StateDestroyed || got.Reason != "deleted" {
		t.Fatalf("get after delete: %+v %v", got, err)
	}
	if err := c.Delete(ctx, "sbx_0000000000000000"); !sclient.IsNotFound(err) {
		t.Fatalf("delete of an unknown id: %v", err)
	}
}

func TestExecCancelAndDroppedConnection(t *testing.T) {
	d := startDaemon(t)
	c := d.local
	sb := create(t, c, api.CreateRequest{})
	// A dropped connection is not a cancel: the command runs to its end.
	ctx, cancel := context.WithCancel(t.Context())
	started := make(chan string, 1)
	go c.Exec(ctx, sb.ID, "sh", sclient.ExecOptions{Args: []string{"-c", "sleep 0.5; echo done > /workspace/finished"}, Started: func(id string) { started <- id }})
	<-started
	cancel()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var b bytes.Buffer
		if _, err := c.Download(t.Context(), sb.ID, "finished", 0, 0, &b); err == nil && b.String() == "done\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the command did not finish after its stream was dropped")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The cancel route stops a running command and confirms it.
	ids := make(chan string, 1)
	res := make(chan error, 1)
	go func() {
		r, err := c.Exec(t.Context(), sb.ID, "sleep", sclient.ExecOptions{Args: []string{"60"}, Started: func(id string) { ids <- id }})
		if err == nil && r.Signal == "" {
			err = fmt.Errorf("not stopped by a signal: %+v", r)
		}
		res <- err
	}()
	id := <-ids // started: the agent has it
	term, err := c.Cancel(t.Context(), sb.ID, id)
	if err != nil || term.State == "" {
		t.Fatalf("cancel: %+v %v", term, err)
	}
	select {
	case err := <-res:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the cancelled command's stream did not end")
	}
}

// TestTenantIsolation tries every route of one tenant's sandbox with
// another tenant's key: each answers exactly as for a missing sandbox.
func TestTenantIsolation(t *testing.T) {
	// The daemon's own logic, on the fake tier: no root needed.
	d, _ := startFakeDaemon(t)
	alice, aliceKey := d.tenant(t, "alice")
	_, bobKey := d.tenant(t, "bob")
	bob, _ := sclient.New("http://"+d.tcp, bobKey)
	bobSaw := make(chan api.Event, 64)
	ectx, stopEvents := context.WithCancel(t.Context())
	defer stopEvents()
	if _, err := bob.Subscribe(ectx, func(ev api.Event) error { bobSaw <- ev; return nil }); err != nil {
		t.Fatal(err)
	}
	// bobCreates makes a sandbox of bob's and waits for its event: the
	// positive control that bob's stream works (and, the first time, is
	// in place), and a marker after which alice's events, emitted before
	// it, would have arrived.
	bobs := map[string]bool{}
	bobCreates := func() {
		t.Helper()
		own := create(t, bob, api.CreateRequest{})
		bobs[own.ID] = true
		for {
			select {
			case ev := <-bobSaw:
				if !bobs[ev.Sandbox] || ev.Tenant != "bob" {
					t.Fatalf("bob received an event not his: %+v", ev)
				}
				if ev.Sandbox == own.ID && ev.Type == api.EventCreated {
					return
				}
			case <-time.After(15 * time.Second):
				t.Fatal("bob's event stream never showed his own create")
			}
		}
	}
	bobCreates()
	sb := create(t, alice, api.CreateRequest{})
	sh(t, alice, sb.ID, "echo secret > mine")
	bobCreates()
	hc := &http.Client{}
	do := func(key, method, path string, body string) (int, string) {
		req, _ := http.NewRequest(method, "http://"+d.tcp+path, strings.NewReader(body))
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	base := "/v1/sandboxes/" + sb.ID
	routes := [][3]string{
		{"GET", base, ""}, {"DELETE", base, ""}, {"POST", base + "/exec", `{"command":"true"}`},
		{"POST", base + "/executions/x/cancel", ""}, {"GET", base + "/files?path=mine", ""},
		{"PUT", base + "/files?path=mine", "x"}, {"DELETE", base + "/files?path=mine", ""},
		{"GET", base + "/stat?path=mine", ""}, {"GET", base + "/dir?path=.", ""}, {"POST", base + "/dir?path=d", ""},
		{"POST", base + "/rename?path=mine&to=theirs", ""},
		{"PUT", base + "/network-policy", `{"mode":"allow-all"}`}, {"POST", base + "/pause", ""}, {"POST", base + "/resume", ""},
		{"POST", base + "/agent/execute", `{"command":"true"}`}, {"GET", base + "/agent/files?path=mine", ""},
	}
	for _, r := range routes {
		missing := strings.Replace(r[1], sb.ID, "sbx_ffffffffffffffff", 1)
		st, body := do(bobKey, r[0], r[1], r[2])
		st2, body2 := do(bobKey, r[0], missing, r[2])
		if st != http.StatusNotFound || strings.Replace(body, sb.ID, "X", -1) != strings.Replace(body2, "sbx_ffffffffffffffff", "X", -1) {
			t.Errorf("%s %s with another tenant's key: %d %s (a missing sandbox: %d %s)", r[0], r[1], st, body, st2, body2)
		}
		if st, _ := do("", r[0], r[1], r[2]); st != http.StatusUnauthorized {
			t.Errorf("%s %s without a key: %d", r[0], r[1], st)
		}
		if st, _ := do("cordon_not-a-key-not-a-key-not-a-key", r[0], r[1], r[2]); st != http.StatusUnauthorized {
			t.Errorf("%s %s with a wrong key: %d", r[0], r[1], st)
		}
	}
	if st, body := do(bobKey, "GET", "/v1/sandboxes", ""); st != 200 || strings.Contains(body, sb.ID) {
		t.Errorf("bob's list: %d %s", st, body)
	}
	// Admin routes need an admin key.
	for _, r := range [][3]string{{"POST", "/v1/keys", `{"tenant":"eve"}`}, {"GET", "/v1/keys", ""}, {"GET", "/v1/pools", ""}, {"PUT", "/v1/pools/p", `{"size":1}`}} {
		if st, _ := do(aliceKey, r[0], r[1], r[2]); st != http.StatusForbidden {
			t.Errorf("%s %s with a tenant key: %d", r[0], r[1], st)
		}
	}
	// Alice's sandbox is untouched.
	if got := sh(t, alice, sb.ID, "cat mine"); got != "secret\n" {
		t.Fatalf("after bob's attempts: %q", got)
	}
}

func TestHostileRequests(t *testing.T) {
	d := startDaemon(t, func(c *server.Config) {
		c.MaxTTL = time.Hour
		c.Limits.MaxSandboxesPerTenant = 2
		c.Limits.MaxBodyBytes = 4096
	})
	c := d.local
	ctx := t.Context()
	_, err := c.Create(ctx, api.CreateRequest{Spec: api.Spec{Env: map[string]string{"X": strings.Repeat("x", 8192)}}})
	wantCode(t, err, http.StatusRequestEntityTooLarge, api.CodeTooLarge)
	_, err = c.Create(ctx, api.CreateRequest{TTLSeconds: 7200})
	wantCode(t, err, http.StatusBadRequest, api.CodeInvalid)
	_, err = c.Create(ctx, api.CreateRequest{Spec: api.Spec{RootFS: "/"}})
	wantCode(t, err, http.StatusForbidden, api.CodeForbidden)
	if err := os.Symlink("/etc", filepath.Join(d.hosts, "escape")); err != nil {
		t.Fatal(err)
	}
	_, err = c.Create(ctx, api.CreateRequest{Spec: api.Spec{Layout: api.Layout{Outputs: filepath.Join(d.hosts, "escape")}}})
	wantCode(t, err, http.StatusForbidden, api.CodeForbidden)
	_, err = c.Create(ctx, api.CreateRequest{Spec: api.Spec{Limits: api.Limits{MemoryBytes: -1}}})
	wantCode(t, err, http.StatusBadRequest, api.CodeInvalid)
	_, err = c.Create(ctx, api.CreateRequest{Spec: api.Spec{Tier: "nonesuch"}})
	wantCode(t, err, http.StatusBadRequest, api.CodeInvalid)
	_, err = c.Create(ctx, api.CreateRequest{Pool: "nonesuch"})
	wantCode(t, err, http.StatusNotFound, api.CodeNotFound)

	raw := func(method, path, body string, hdr ...string) (int, string) {
		conn, err := net.Dial("unix", d.sock)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: cordon\r\nConnection: close\r\n%s\r\n%s", method, path, strings.Join(hdr, ""), body)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, b := range []string{`{`, `[]`, `{"tier":1}`, `{"bogus":true}`, `{} {}`} {
		if st, body := raw("POST", "/v1/sandboxes", b, fmt.Sprintf("Content-Length: %d\r\n", len(b))); st != 400 || !strings.Contains(body, api.CodeInvalid) {
			t.Errorf("body %q: %d %s", b, st, body)
		}
	}
	if st, body := raw("GET", "/v1/sandboxes", "", "X-Big: "+strings.Repeat("a", 128<<10)+"\r\n"); st != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("huge header: %d %s", st, body)
	}
	sb := create(t, c, api.CreateRequest{})
	// A chunked upload is taken; one whose framing breaks leaves the
	// file as it was.
	if st, body := raw("PUT", "/v1/sandboxes/"+sb.ID+"/files?path=x", "5\r\nhello\r\n0\r\n\r\n", "Transfer-Encoding: chunked\r\n"); st != http.StatusOK || !strings.Contains(body, `"bytesWritten":5`) {
		t.Errorf("chunked upload: %d %s", st, body)
	}
	if st, body := raw("PUT", "/v1/sandboxes/"+sb.ID+"/files?path=x", "3\r\nbye\r\nzz\r\n", "Transfer-Encoding: chunked\r\n"); st < 400 || st >= 500 {
		t.Errorf("a broken chunked upload: %d %s", st, body)
	}
	var kept bytes.Buffer
	if _, err := c.Download(t.Context(), sb.ID, "x", 0, -1, &kept); err != nil || kept.String() != "hello" {
		t.Errorf("after a broken chunked upload: %q %v", kept.String(), err)
	}
	if st, body := raw("GET", "/v1/sandboxes/"+sb.ID+"/files", ""); st != 400 {
		t.Errorf("no path: %d %s", st, body)
	}
	create(t, c, api.CreateRequest{})
	_, err = c.Create(ctx, api.CreateRequest{})
	wantCode(t, err, http.StatusTooManyRequests, api.CodeQuota)
}

// TestReaper: TTLs and idle timeouts end sandboxes, a running command
// keeps its sandbox from being idle; the daemon's own logic, on the fake
// tier.
func TestReaper(t *testing.T) {
	d, _ := startFakeDaemon(t)
	c := d.local
	ctx := t.Context()
	ttl, err := c.Create(ctx, api.CreateRequest{TTLSeconds: 1, IdleTimeoutSeconds: -1})
	if err != nil {
		t.Fatal(err)
	}
	idle, err := c.Create(ctx, api.CreateRequest{IdleTimeoutSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	busy, err := c.Create(ctx, api.CreateRequest{IdleTimeoutSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Delete(context.Background(), busy.ID) })
	// A command that runs for longer than the idle timeout, with its
	// stream dropped at once: only the agent knows it is still running.
	sctx, cancel := context.WithCancel(ctx)
	started := make(chan string, 1)
	go c.Exec(sctx, busy.ID, "sleep", sclient.ExecOptions{Args: []string{"3"}, Started: func(string) { started <- "" }})
	<-started
	cancel()
	gone := func(id string) bool {
		sb, err := c.Get(ctx, id)
		return err == nil && sb.State == api.StateDestroyed
	}
	deadline := time.Now().Add(15 * time.Second)
	for !(gone(ttl.ID) && gone(idle.ID)) {
		if time.Now().After(deadline) {
			t.Fatalf("not reaped: ttl %v, idle %v", !gone(ttl.ID), !gone(idle.ID))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if gone(busy.ID) {
		t.Fatal("a sandbox running a command was reaped as idle")
	}
	// Once the command ends, it is idle too.
	for deadline := time.Now().Add(15 * time.Second); !gone(busy.ID); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the busy sandbox was never reaped after its command ended")
		}
	}
	// Reaped is final: deleting it again succeeds, its id answers 404.
	if err := c.Delete(ctx, ttl.ID); err != nil {
		t.Fatalf("delete of a reaped sandbox: %v", err)
	}
}

// TestPoolClaims: fifty concurrent creates each get a sandbox of their
// own from a warm pool, which refills; on the fake tier.
func TestPoolClaims(t *testing.T) {
	d, _ := startFakeDaemon(t)
	c := d.local
	ctx := t.Context()
	if _, err := c.PutPool(ctx, "warm", api.Spec{}, 4); err != nil {
		t.Fatal(err)
	}
	waitPool(t, c, "warm", 4)
	const n = 50
	var wg sync.WaitGroup
	ids := make([]string, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb, err := c.Create(ctx, api.CreateRequest{Labels: map[string]string{"i": fmt.Sprint(i)}})
			if err == nil {
				ids[i] = sb.ID
				_, err = c.Exec(ctx, sb.ID, "sh", sclient.ExecOptions{Args: []string{"-c", "echo " + sb.ID + " > owner"}})
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	pooled := 0
	for i, id := range ids {
		if errs[i] != nil {
			t.Fatalf("create %d: %v", i, errs[i])
		}
		if seen[id] {
			t.Fatalf("sandbox %s handed out twice", id)
		}
		seen[id] = true
		// Each sandbox holds exactly what its own claimant wrote.
		var b bytes.Buffer
		if _, err := c.Download(ctx, id, "owner", 0, 0, &b); err != nil || b.String() != id+"\n" {
			t.Fatalf("%s's workspace holds %q (%v)", id, b.String(), err)
		}
		if sb, _ := c.Get(ctx, id); sb.Pool == "warm" {
			pooled++
		}
	}
	if pooled != n {
		t.Errorf("%d of %d creates matched the pool", pooled, n)
	}
	for _, id := range ids {
		if err := c.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	waitPool(t, c, "warm", 4)
	if err := c.DeletePool(ctx, "warm"); err != nil {
		t.Fatal(err)
	}
}

func waitPool(t testing.TB, c *sclient.Client, name string, ready int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ps, err := c.Pools(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			if p.Name == name && p.Ready >= ready {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool %s never reached %d ready: %+v", name, ready, ps)
		}
	}
}

func TestEvents(t *testing.T) {
	d := startDaemon(t)
	c := d.local
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	evs := make(chan api.Event, 64)
	if _, err := c.Subscribe(ctx, func(ev api.Event) error { evs <- ev; return nil }); err != nil {
		t.Fatal(err)
	}
	sb, err := c.Create(ctx, api.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	sh(t, c, sb.ID, "true")
	sh(t, c, sb.ID, "curl -sS http://refused.invalid:81/ || true")
	if err := c.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(got) < 8 {
		select {
		case ev := <-evs:
			if ev.Sandbox == sb.ID {
				got = append(got, ev.Type)
			}
			if ev.Type == api.EventEgressRefused && (ev.Data["host"] != "refused.invalid" || ev.Data["reason"] != "the sandbox's egress policy is deny-all") {
				t.Errorf("egress refusal event: %v", ev.Data)
			}
		case <-ctx.Done():
			t.Fatalf("events so far: %v", got)
		}
	}
	if strings.Join(got, " ") != "created ready exec.started exec.finished exec.started egress.refused exec.finished destroyed" {
		t.Fatalf("events: %v", got)
	}
}

// TestRestart: a daemon that stops leaves its sandboxes running, and the
// next one takes back every recorded sandbox that still answers, records
// the ones that do not as lost, and removes what no record explains.
func TestRestart(t *testing.T) {
	d := startDaemon(t)
	ctx := t.Context()
	c := d.local
	// (The last daemon's Close destroys what this test leaves.)
	kept, err := c.Create(ctx, api.CreateRequest{Labels: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	sh(t, c, kept.ID, "echo before > state")
	paused, err := c.Create(ctx, api.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Pause(ctx, paused.ID); err != nil {
		t.Fatal(err)
	}
	lostMark := newMark()
	lost, err := c.Create(ctx, api.CreateRequest{Spec: api.Spec{Env: map[string]string{markVar: lostMark}}})
	if err != nil {
		t.Fatal(err)
	}
	k, err := c.CreateKey(ctx, api.KeyRequest{Tenant: "kept"})
	if err != nil {
		t.Fatal(err)
	}
	// A sandbox started on the tier behind the daemon's back: no record.
	p := sandbox.NewProvider([]sandbox.Backend{d.backend})
	stray, err := p.Create(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	d.stop(t, false)
	// While the daemon is down, one sandbox dies.
	if err := d.backend.instance(lostMark).(interface{ Kill() error }).Kill(); err != nil {
		t.Fatal(err)
	}
	<-d.backend.instance(lostMark).Exited()

	d.start(t)
	if got := sh(t, c, kept.ID, "cat state"); got != "before\n" {
		t.Fatalf("after restart: %q", got)
	}
	if sb, err := c.Get(ctx, kept.ID); err != nil || sb.Labels["k"] != "v" || sb.State != api.StateRunning {
		t.Fatalf("kept: %+v %v", sb, err)
	}
	if sb, err := c.Get(ctx, paused.ID); err != nil || sb.State != api.StatePaused {
		t.Fatalf("paused: %+v %v", sb, err)
	}
	if _, err := c.Resume(ctx, paused.ID); err != nil {
		t.Fatal(err)
	}
	sh(t, c, paused.ID, "true")
	if sb, err := c.Get(ctx, lost.ID); err != nil || sb.State != api.StateDestroyed || sb.Reason != "lost" {
		t.Fatalf("lost: %+v %v", sb, err)
	}
	if err := c.Delete(ctx, lost.ID); err != nil {
		t.Fatalf("delete of a lost sandbox: %v", err)
	}
	if _, err := stray.Exec(ctx, "true", sandbox.ExecOptions{}); err == nil {
		t.Fatal("an unrecorded sandbox survived the restart")
	}
	_ = stray.Destroy(ctx)
	ents, _ := os.ReadDir(d.processDir)
	held := 0
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "sb-") { // beside what sandboxes share
			held++
		}
	}
	if held != 2 {
		t.Fatalf("the tier holds %d sandboxes, want the 2 kept", held)
	}
	// Keys survive too.
	kc, _ := sclient.New("http://"+d.tcp, k.Secret)
	if _, err := kc.List(ctx, sclient.ListOptions{}); err != nil {
		t.Fatalf("key after restart: %v", err)
	}
}

func TestOpenRoutes(t *testing.T) {
	d := startDaemon(t)
	sb := create(t, d.local, api.CreateRequest{})
	sh(t, d.local, sb.ID, "true")
	get := func(path string) string {
		resp, err := http.Get("http://" + d.tcp + path) // no key: these are open
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	if doc := get("/v1/openapi.yaml"); !strings.HasPrefix(doc, "openapi: 3.") || !strings.Contains(doc, "/v1/sandboxes/{id}/agent/{path}:") {
		t.Fatalf("document: %.200s", doc)
	}
	if h := get("/healthz"); !strings.Contains(h, `"ok":true`) {
		t.Fatalf("healthz: %s", h)
	}
	m := get("/metrics")
	for _, want := range []string{
		`cordon_sandboxes{state="running",tier="process"} 1`,
		`cordon_sandbox_create_seconds_count{source="cold"} 1`,
		"cordon_exec_seconds_count 1",
		`cordon_egress_decisions_total{decision="refused"} 0`,
		"cordon_egress_sandboxes 1",
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// TestContainerTier: the daemon serves container-tier sandboxes as it does
// the process tier's, and takes them back after a restart.
func TestContainerTier(t *testing.T) {
	testutil.Requires(t, "crun")
	d := startDaemon(t)
	dir := filepath.Join(d.processDir, "oci")
	if err := os.MkdirAll(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	d.container = oci.New(oci.Config{Runtime: "crun", AgentPath: testutil.BuildAgent(t), StateDir: dir, Detached: true})
	d.stop(t, true)
	d.start(t)
	c := d.local
	ctx := t.Context()
	sb, err := c.Create(ctx, api.CreateRequest{Spec: api.Spec{Tier: "container", Limits: api.Limits{MemoryBytes: 256 << 20}}})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Spec.Tier != "container" || !sb.Pausable {
		t.Fatalf("created: %+v", sb)
	}
	sh(t, c, sb.ID, "echo kept > mine")
	d.stop(t, false)
	d.start(t)
	if got := sh(t, c, sb.ID, "cat mine; cat /proc/1/comm"); got != "kept\ncordon-agent\n" {
		t.Fatalf("after restart: %q", got)
	}
	if _, err := c.Pause(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if !containersShare(e.Name()) {
			t.Fatalf("left in the container tier's directory: %v", ents)
		}
	}
}

// TestStaleSpare: the daemon's exec route holds a spare reservation on the
// agent; when the agent has let it go (here: its capacity filled through
// the agent route, which makes spares yield), the exec still runs, on a
// fresh reservation, instead of failing with unknown_execution.
func TestStaleSpare(t *testing.T) {
	d := startDaemon(t)
	c, key := d.tenant(t, "spare")
	ctx := t.Context()
	sb, err := c.Create(ctx, api.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// Two commands: the daemon's client now keeps a spare, taken in the
	// background.
	for range 2 {
		sh(t, c, sb.ID, "true")
	}
	time.Sleep(200 * time.Millisecond)
	ac := client.New(client.Endpoint{Network: "tcp", Address: d.tcp, Token: key, Prefix: "/v1/sandboxes/" + sb.ID + "/agent"})
	defer ac.Close()
	// Reservations asked for take every slot: finished records go first,
	// then the spare.
	var ours []string
	for {
		r, err := ac.Reserve(ctx)
		if err != nil {
			var ae *client.Error
			if !errors.As(err, &ae) || ae.Code != wire.CodeExecutionCapacity {
				t.Fatalf("reserve %d: %v", len(ours), err)
			}
			break
		}
		ours = append(ours, r.ExecutionID)
	}
	if len(ours) != 1024 {
		t.Fatalf("%d reservations fit; want the agent's 1024, the spare given up", len(ours))
	}
	// Room for one more, and the daemon's spare is stale.
	if _, err := ac.Cancel(ctx, ours[0]); err != nil {
		t.Fatal(err)
	}
	if got := sh(t, c, sb.ID, "echo fresh"); got != "fresh\n" {
		t.Fatalf("exec on a stale spare: %q", got)
	}
}

// TestTenantEgressSpecial: a tenant cannot open its sandbox's way to the
// daemon's host or its network (loopback services, the cloud's metadata
// and credentials, private ranges) by naming them in an egress rule, at
// create, in a template or in a policy change (403, naming the rule); the
// operator can (an admin key here), and a tenant's broad rule reaches only
// ordinary addresses (egress: TestMatching).
func TestTenantEgressSpecial(t *testing.T) {
	testutil.RequiresRoot(t) // the process tier's egress boundary
	d := startDaemon(t)
	alice, _ := d.tenant(t, "alice")
	ctx := t.Context()
	rules := func(hosts ...string) *api.Egress {
		e := &api.Egress{}
		for _, h := range hosts {
			e.Rules = append(e.Rules, egress.Rule{Host: h})
		}
		return e
	}
	special := []string{"127.0.0.1", "169.254.169.254", "10.0.0.0/8", "192.168.1.0/24", "fd00::/8", "0.0.0.0", "::1"}
	for _, h := range special {
		_, err := alice.Create(ctx, api.CreateRequest{Spec: api.Spec{Egress: rules("example.test", h)}})
		if !sclient.Is(err, sclient.ErrForbidden) || !strings.Contains(err.Error(), h) {
			t.Errorf("a tenant's create with %s: %v, want 403 naming it", h, err)
		}
	}
	if _, err := alice.PutTemplate(ctx, "t1", api.Template{Spec: api.Spec{Egress: rules("10.1.2.3")}}); !sclient.Is(err, sclient.ErrForbidden) {
		t.Errorf("a tenant's template with a private rule: %v, want 403", err)
	}
	sb := create(t, alice, api.CreateRequest{Spec: api.Spec{Egress: rules("0.0.0.0/0", "192.0.2.0/24", "example.test")}})
	if _, err := alice.SetNetworkPolicy(ctx, sb.ID, *rules("169.254.169.254")); !sclient.Is(err, sclient.ErrForbidden) {
		t.Errorf("a tenant's policy change to the metadata address: %v, want 403", err)
	}
	if got, err := alice.Get(ctx, sb.ID); err != nil || len(got.Spec.Egress.Rules) != 3 {
		t.Errorf("the refused change changed the policy: %+v %v", got, err)
	}
	// The operator may.
	own := create(t, d.local, api.CreateRequest{Spec: api.Spec{Egress: rules("10.0.0.0/8")}})
	if _, err := d.local.SetNetworkPolicy(ctx, own.ID, *rules("127.0.0.1")); err != nil {
		t.Errorf("the administrator's policy change: %v", err)
	}
}
