package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/agent/wire"
	"github.com/cordon-sandbox/cordon/server"
	"github.com/cordon-sandbox/cordon/server/api"
	sclient "github.com/cordon-sandbox/cordon/server/client"
)

// The daemon against what a user or a hostile caller found it did wrong:
// host directories a sandbox could write set-id programs into, commands
// past their deadline, OOM kills and lost agents nobody was told of,
// out-of-range and malformed requests, racing deletes, a shutdown that
// waited on event streams.

// TestLayoutSetID: through the REST API, a root-owned read-write layout
// directory is refused (400, naming layout.owner), an owner given in the
// spec writes it as that user, and a sandbox cannot leave a set-id file in
// a host directory: the host finds none after it tried.
func TestLayoutSetID(t *testing.T) {
	d := startDaemon(t)
	c := d.local
	root := filepath.Join(d.hosts, "root-owned")
	if err := os.Mkdir(root, 0o1777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(root, 0o1777)
	_, err := c.Create(t.Context(), api.CreateRequest{Spec: api.Spec{Layout: api.Layout{Outputs: root}}})
	wantCode(t, err, http.StatusBadRequest, api.CodeInvalid)
	if !strings.Contains(err.Error(), "layout.owner") {
		t.Errorf("the refusal does not say what to do: %v", err)
	}
	sb := create(t, c, api.CreateRequest{Spec: api.Spec{Layout: api.Layout{Outputs: root, Owner: &api.Owner{UID: 4321, GID: 4321}}}})
	got := sh(t, c, sb.ID, `cd /mnt/user-data/outputs && cp /usr/bin/id x && echo ok
chmod 4755 x 2>/dev/null; chmod g+s x 2>/dev/null; mkdir d && chmod 2775 d 2>/dev/null
python3 -c 'import os; os.open("z", os.O_CREAT|os.O_WRONLY, 0o6755)' 2>/dev/null; true`)
	if got != "ok\n" {
		t.Fatalf("%q", got)
	}
	if err := c.Delete(t.Context(), sb.ID); err != nil {
		t.Fatal(err)
	}
	n := 0
	err = filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		n++
		if st := fi.Sys().(*syscall.Stat_t); p != root && st.Uid != 4321 {
			t.Errorf("%s belongs to %d on the host", p, st.Uid)
		}
		if fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
			t.Errorf("the host finds %s %v", p, fi.Mode())
		}
		return nil
	})
	if err != nil || n != 3 {
		t.Fatalf("walked %d entries (%v), want the directory, x and d", n, err)
	}
}

// TestExecHostDeadline: through the REST API, a command whose sandbox is
// frozen (its agent can neither stop it nor report it) ends at the
// daemon's own deadline: the stream's error event says why, the sandbox is
// torn down, and it is recorded destroyed with the reason. (The command's
// timeout leaves the pause time to land on a loaded machine: paused after
// the timeout, the agent would have ended the command itself.)
func TestExecHostDeadline(t *testing.T) {
	d := startDaemonGrace(t, 300*time.Millisecond)
	c := d.local
	sb, err := c.Create(t.Context(), api.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	var once sync.Once
	done := make(chan error, 1)
	go func() {
		_, err := c.Exec(t.Context(), sb.ID, "sh", sclient.ExecOptions{Args: []string{"-c", "echo started; sleep 60"}, Timeout: 3 * time.Second,
			Stdout: writerFunc(func(b []byte) (int, error) { once.Do(func() { close(started) }); return len(b), nil })})
		done <- err
	}()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("the command ended before it was frozen: %v", err)
	}
	if _, err := c.Pause(t.Context(), sb.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the exec did not end a minute past the daemon's deadline")
	}
	if err == nil || !strings.Contains(err.Error(), "tore the sandbox down") {
		t.Fatalf("exec of a frozen sandbox: %v", err)
	}
	got, err := c.Get(t.Context(), sb.ID)
	if err != nil || got.State != api.StateDestroyed || got.Reason != "deadline" {
		t.Fatalf("after the deadline: %+v %v", got, err)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// TestExecOOM: through the REST API, a child killed for memory while the
// command ran is reported in the result (oomKills), though the command
// itself outlived it, and as an oom event.
func TestExecOOM(t *testing.T) {
	d := startDaemon(t)
	c := d.local
	ctx, evs := subscribe(t, c)
	sb := create(t, c, api.CreateRequest{Spec: api.Spec{Limits: api.Limits{MemoryBytes: 128 << 20}}})
	var out strings.Builder
	res, err := c.Exec(ctx, sb.ID, "sh", sclient.ExecOptions{Args: []string{"-c", "python3 -c 'b = []\nwhile True: b.append(bytearray(16 << 20))'; echo after"}, Stdout: &out})
	if err != nil || res.ExitCode != 0 || res.OOMKills != 1 || out.String() != "after\n" {
		t.Fatalf("result %+v %v, stdout %q", res, err, out.String())
	}
	waitEvent(t, ctx, evs, api.EventOOM, sb.ID)
}

// TestLost: a sandbox whose agent is killed lists as lost, with the
// reason, in the API and its events, and refuses work with 409 rather than
// a 502; a delete removes what is left. Here its memory fills with files
// the agent wrote, the way a full workspace once killed the agent, and
// then the agent is killed outright.
func TestLost(t *testing.T) {
	d := startDaemon(t)
	c := d.local
	ctx, evs := subscribe(t, c)
	// A full workspace is ENOSPC for the workload, and the agent serves on.
	full := create(t, c, api.CreateRequest{Spec: api.Spec{Limits: api.Limits{MemoryBytes: 128 << 20}}})
	if got := sh(t, c, full.ID, "head -c 200000000 /dev/zero > big 2>/dev/null || echo enospc; echo alive"); got != "enospc\nalive\n" {
		t.Fatalf("a full workspace: %q", got)
	}
	mark := newMark()
	sb, err := c.Create(ctx, api.CreateRequest{Spec: api.Spec{Env: map[string]string{markVar: mark}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.backend.instance(mark).(interface{ Kill() error }).Kill(); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, ctx, evs, api.EventLost, sb.ID)
	got, err := c.Get(ctx, sb.ID)
	if err != nil || got.State != api.StateLost || !strings.Contains(got.Reason, "agent exited") {
		t.Fatalf("get: %+v %v", got, err)
	}
	list, err := c.List(ctx, sclient.ListOptions{})
	if err != nil || !slices.ContainsFunc(list, func(s api.Sandbox) bool { return s.ID == sb.ID && s.State == api.StateLost }) {
		t.Fatalf("list: %+v %v", list, err)
	}
	_, err = c.Exec(ctx, sb.ID, "true", sclient.ExecOptions{})
	wantCode(t, err, http.StatusConflict, api.CodeLost)
	if err := c.Delete(ctx, sb.ID); err != nil {
		t.Fatalf("delete of a lost sandbox: %v", err)
	}
}

// TestHostileLimits: out-of-range limits, durations that would overflow,
// an environment value with a NUL byte, labels and key names with
// characters that act on a terminal, a null exec body, unknown routes and
// methods: each is refused with a 4xx in the API's JSON shape, naming
// the field and its range, never a 5xx or a dropped connection.
func TestHostileLimits(t *testing.T) {
	d, _ := startFakeDaemon(t, func(c *server.Config) { c.MaxTTL = time.Hour })
	c := d.local
	ctx := t.Context()
	for _, req := range []api.CreateRequest{
		{Spec: api.Spec{Limits: api.Limits{MemoryBytes: 1}}},
		{Spec: api.Spec{Limits: api.Limits{MemoryBytes: 4096}}},
		{Spec: api.Spec{Limits: api.Limits{Pids: 1 << 40}}},
		{Spec: api.Spec{Limits: api.Limits{CPUs: 1e9}}},
		{Spec: api.Spec{Limits: api.Limits{CPUs: 1e-4}}},
		{Spec: api.Spec{Limits: api.Limits{MemoryBytes: 64 << 20, DiskBytes: 128 << 20}}},
		{Spec: api.Spec{Env: map[string]string{"A": "x\x00y"}}},
		{Spec: api.Spec{MaxTimeoutMs: 1 << 50}},
		{TTLSeconds: 9300000000},
		{TTLSeconds: 1 << 62},
		{TTLSeconds: 18446744074},
		{IdleTimeoutSeconds: 9300000000},
		// Labels another tenant's administrator reads on a terminal.
		{Labels: map[string]string{"note": "\x1b[2J\x1b]0;title\a"}},
		{Labels: map[string]string{"note": "a\nforged line"}},
		{Labels: map[string]string{"note": "\u202eevil"}},
		{Labels: map[string]string{"a=b": "x"}},
		{Labels: map[string]string{"a b": "x"}},
		{Labels: map[string]string{"a,b": "x"}},
		{Labels: map[string]string{"\x00": "x"}},
	} {
		_, err := c.Create(ctx, req)
		var e *api.Error
		if !errors.As(err, &e) || e.Status != http.StatusBadRequest || e.Code != api.CodeInvalid || len(e.Message) < 40 {
			t.Errorf("%+v: %v", req, err)
		}
	}
	raw := func(method, path, body string) (int, map[string]any) {
		req, _ := http.NewRequest(method, "http://cordon"+path, strings.NewReader(body))
		resp, err := d.unixClient().Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		var m map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			t.Errorf("%s %s: %d, not JSON: %v", method, path, resp.StatusCode, err)
		}
		return resp.StatusCode, m
	}
	labelled := create(t, c, api.CreateRequest{Labels: map[string]string{"team": "ünïcode & spaces, fine", "app.example.test/tier": "web"}})
	if len(labelled.Labels) != 2 {
		t.Errorf("printable labels: %v", labelled.Labels)
	}
	for _, name := range []string{"\x1b]0;title\a", "line\nbreak", strings.Repeat("n", 129)} {
		_, err := c.CreateKey(ctx, api.KeyRequest{Tenant: "t1", Name: name})
		var e *api.Error
		if !errors.As(err, &e) || e.Status != http.StatusBadRequest {
			t.Errorf("a key named %q: %v", name, err)
		}
	}
	sb := create(t, c, api.CreateRequest{})
	if st, m := raw("POST", "/v1/sandboxes/"+sb.ID+"/exec", "null"); st != 400 || m["error"] != api.CodeInvalid {
		t.Errorf("exec null: %d %v", st, m)
	}
	// The agent's own refusals, passed on, say why too (the reference's
	// carry only a code), and name the sandbox's ceiling as a caller of
	// the daemon sets it.
	if st, m := raw("POST", "/v1/sandboxes/"+sb.ID+"/exec", "{}"); st != 400 || m["error"] != "missing_command" || !strings.Contains(fmt.Sprint(m["message"]), "names no command") {
		t.Errorf("exec without a command: %d %v", st, m)
	}
	if st, m := raw("POST", "/v1/sandboxes/"+sb.ID+"/exec", `{"command":"true","timeoutMs":-1}`); st != 400 || !strings.Contains(fmt.Sprint(m["message"]), "maxTimeoutMs at create") {
		t.Errorf("exec with a negative timeout: %d %v", st, m)
	}
	if st, m := raw("GET", "/v1/nonesuch", ""); st != 404 || m["error"] != api.CodeNotFound {
		t.Errorf("unknown route: %d %v", st, m)
	}
	if st, m := raw("PATCH", "/v1/sandboxes", ""); st != 405 || m["error"] != api.CodeMethod {
		t.Errorf("unknown method: %d %v", st, m)
	}
}

// TestConcurrentDeletes: ten DELETEs of one sandbox at once each answer
// 204, and it has one teardown and one destroyed event.
func TestConcurrentDeletes(t *testing.T) {
	d, _ := startFakeDaemon(t)
	c := d.local
	ctx, evs := subscribe(t, c)
	for round := range 5 {
		sb, err := c.Create(ctx, api.CreateRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 10)
		for range 10 {
			wg.Add(1)
			go func() { defer wg.Done(); errs <- c.Delete(ctx, sb.ID) }()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("round %d: a delete: %v", round, err)
			}
		}
		// The sandbox's last event is its one destroyed, and no second
		// comes after the next sandbox's created.
		next, err := c.Create(ctx, api.CreateRequest{})
		if err != nil {
			t.Fatal(err)
		}
		destroyed := 0
	wait:
		for {
			select {
			case ev := <-evs:
				if ev.Sandbox == sb.ID && ev.Type == api.EventDestroyed {
					destroyed++
				}
				if ev.Sandbox == next.ID && ev.Type == api.EventCreated {
					break wait
				}
			case <-ctx.Done():
				t.Fatal("events stopped")
			}
		}
		if destroyed != 1 {
			t.Fatalf("round %d: %d destroyed events", round, destroyed)
		}
		if err := c.Delete(ctx, next.ID); err != nil {
			t.Fatal(err)
		}
	}
}

// TestShutdownEndsStreams: an HTTP server shutting down, as cordon serve
// does on SIGTERM, does not wait its whole grace for event streams, which
// never end by themselves: their subscribers see the stream end.
func TestShutdownEndsStreams(t *testing.T) {
	d, _ := startFakeDaemon(t)
	ended, err := d.local.Subscribe(context.Background(), func(api.Event) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for _, hs := range d.https {
		if err := hs.Shutdown(ctx); err != nil {
			t.Fatalf("shutdown with a subscriber: %v", err)
		}
	}
	select {
	case <-ended:
	case <-ctx.Done():
		t.Fatal("the event stream did not end")
	}
}

// TestSessionHostDeadline: a session's timeout is held by the daemon too.
// Its agent frozen (SIGSTOP from the host, which no workload can send),
// the session runs on past its timeout; a grace later the daemon finds
// the agent unable to end it and tears the sandbox down, recorded
// "deadline". The same holds for a session started before a restart of
// the daemon, which takes its deadline back with the sandbox, or when it
// is resumed where it was adopted paused. Through the REST API's session
// route and the agent passthrough.
func TestSessionHostDeadline(t *testing.T) {
	d := startDaemonGrace(t, 300*time.Millisecond)
	c := d.local
	for _, restart := range []string{"", "restart", "restart paused"} {
		sb, err := c.Create(t.Context(), api.CreateRequest{})
		if err != nil {
			t.Fatal(err)
		}
		agent := agentPid(t, c, sb.ID)
		if restart != "" {
			// Through the agent passthrough, then the daemon restarts
			// (with the sandbox paused, resumed after).
			if _, err := c.Agent(sb.ID).StartSession(t.Context(), wire.SessionRequest{Command: "sleep", Args: []string{"600"}, TimeoutMs: 2000}); err != nil {
				t.Fatal(err)
			}
			if restart == "restart paused" {
				if _, err := c.Pause(t.Context(), sb.ID); err != nil {
					t.Fatal(err)
				}
			}
			d.stop(t, false)
			d.start(t)
			c = d.local
			if restart == "restart paused" {
				if _, err := c.Resume(t.Context(), sb.ID); err != nil {
					t.Fatal(err)
				}
			}
		} else {
			// Sessions started with timeouts and forgotten, more of them
			// than the daemon holds deadlines for before it asks the agent
			// which still run.
			for range 300 {
				ses := startSession(t, d, sb.ID, wire.SessionRequest{Command: "true", TimeoutMs: 3_600_000})
				if _, err := c.Agent(sb.ID).WaitSession(t.Context(), ses.ID, 10*time.Second); err != nil {
					t.Fatal(err)
				}
				if err := c.Agent(sb.ID).ForgetSession(t.Context(), ses.ID); err != nil {
					t.Fatal(err)
				}
			}
			// Through the REST API's own route.
			if ses := startSession(t, d, sb.ID, wire.SessionRequest{Command: "sleep", Args: []string{"600"}, TimeoutMs: 1000}); ses.TimeoutMs != 1000 {
				t.Fatalf("start: %+v", ses)
			}
		}
		if err := syscall.Kill(agent, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
			got, err := c.Get(t.Context(), sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.State == api.StateDestroyed {
				if got.Reason != "deadline" {
					t.Fatalf("%q: destroyed for %q", restart, got.Reason)
				}
				break
			}
			if time.Now().After(deadline) {
				_ = syscall.Kill(agent, syscall.SIGCONT)
				t.Fatalf("%q: a sandbox whose frozen agent could not end a session is %s a minute on", restart, got.State)
			}
		}
	}
}

// startSession starts a session through the REST API's own route, as the
// local administrator.
func startSession(t *testing.T, d *daemon, id string, req wire.SessionRequest) wire.Session {
	t.Helper()
	body, _ := json.Marshal(req)
	resp, err := d.unixClient().Post("http://cordon/v1/sandboxes/"+id+"/sessions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ses wire.Session
	if err := json.NewDecoder(resp.Body).Decode(&ses); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("start: %d %v", resp.StatusCode, err)
	}
	return ses
}

// agentPid is the host's pid of sandbox id's agent: the cordon-agent in
// the PID namespace its commands run in.
func agentPid(t *testing.T, c *sclient.Client, id string) int {
	t.Helper()
	var out strings.Builder
	if _, err := c.Exec(t.Context(), id, "readlink", sclient.ExecOptions{Args: []string{"/proc/self/ns/pid"}, Stdout: &out}); err != nil {
		t.Fatal(err)
	}
	ns := strings.TrimSpace(out.String())
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		comm, _ := os.ReadFile("/proc/" + p.Name() + "/comm")
		if link, _ := os.Readlink("/proc/" + p.Name() + "/ns/pid"); link == ns && strings.TrimSpace(string(comm)) == "cordon-agent" {
			return pid
		}
	}
	t.Fatalf("no cordon-agent in %s", ns)
	return 0
}
