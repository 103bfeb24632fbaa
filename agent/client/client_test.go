package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/agent/wire"
)

// fakeAgent serves reserve and cancel, and an /execute stream that breaks
// after one delta, as a dropped connection would.
func fakeAgent(t *testing.T, cancels *atomic.Int32) client.Endpoint {
	const id = "exec_00000000-0000-4000-8000-000000000001"
	return serveOn(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case wire.RouteHealthz:
			fmt.Fprint(w, `{"ok":true,"protocolVersion":1}`)
		case wire.RouteReserve:
			w.WriteHeader(201)
			fmt.Fprintf(w, `{"ok":true,"protocolVersion":2,"executionId":%q}`, id)
		case wire.RouteExecute:
			w.Write([]byte(`{"type":"stdout_delta","data":"partial"}` + "\n"))
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler) // the connection drops mid-stream
		case wire.RouteCancel:
			cancels.Add(1)
			fmt.Fprint(w, `{"ok":true,"state":"completed","started":true,"result":{"exitCode":0,"timedOut":false,"durationMs":5,"stdoutTruncated":false,"stderrTruncated":false}}`)
		}
	})})
}

// serveOn serves srv on a unix socket of its own until the test ends.
func serveOn(t *testing.T, srv *http.Server) client.Endpoint {
	sock := filepath.Join(t.TempDir(), "a.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return client.Endpoint{Network: "unix", Address: sock}
}

func TestBrokenStreamIsReconciled(t *testing.T) {
	var cancels atomic.Int32
	c := client.New(fakeAgent(t, &cancels))
	defer c.Close()
	res, err := c.Exec(context.Background(), "x", client.ExecOptions{})
	if !errors.Is(err, client.ErrIncompleteStream) || res == nil || res.ExitCode != 0 {
		t.Fatalf("res %+v err %v, want the confirmed result and ErrIncompleteStream", res, err)
	}
	if cancels.Load() != 1 {
		t.Fatalf("%d cancels, want the outcome confirmed through /cancel once", cancels.Load())
	}
}

func TestAdmitRefusesOtherVersions(t *testing.T) {
	var cancels atomic.Int32
	c := client.New(fakeAgent(t, &cancels))
	defer c.Close()
	if _, err := c.Admit(context.Background()); !errors.Is(err, client.ErrProtocolMismatch) {
		t.Fatalf("err %v, want ErrProtocolMismatch", err)
	}
	if _, err := c.WaitReady(context.Background()); !errors.Is(err, client.ErrProtocolMismatch) {
		t.Fatalf("WaitReady: %v", err)
	}
}

// leaseAgent keeps reservations as the agent does: an id is reserved once
// and started once; an unknown id answers 404 unknown_execution. Its log
// records, in order, each reservation and each execute.
type leaseAgent struct {
	conns    atomic.Int32 // connections accepted
	mu       sync.Mutex
	reserved map[string]bool
	log      []string
	n        int
	// requests counts reservation requests (a next lease is none).
	requests int
	// hold, when set, makes an execute wait until that many reservations
	// exist, so that a spare is on the agent before the command answers.
	hold func(execs int) int
	cond *sync.Cond
}

func (a *leaseAgent) note(s string) {
	a.log = append(a.log, s)
	a.cond.Broadcast()
}

func (a *leaseAgent) forget() {
	a.mu.Lock()
	clear(a.reserved)
	a.mu.Unlock()
}

func startLeaseAgent(t *testing.T) (*leaseAgent, client.Endpoint) {
	a := &leaseAgent{reserved: map[string]bool{}}
	a.cond = sync.NewCond(&a.mu)
	reserves, execs := 0, 0
	return a, serveOn(t, &http.Server{ConnState: func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			a.conns.Add(1)
		}
	}, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		defer a.mu.Unlock()
		switch r.URL.Path {
		case wire.RouteReserve:
			a.n++
			a.requests++
			reserves++
			id := fmt.Sprintf("exec_00000000-0000-4000-8000-%012d", a.n)
			a.reserved[id] = true
			a.note("reserve " + id)
			w.WriteHeader(201)
			fmt.Fprintf(w, `{"ok":true,"protocolVersion":2,"executionId":%q,"leaseExpiresAt":%d}`, id, time.Now().Add(30*time.Second).UnixMilli())
		case wire.RouteExecute:
			var req wire.ExecuteRequest
			json.NewDecoder(r.Body).Decode(&req)
			if !a.reserved[req.ExecutionID] {
				a.note("refused " + req.ExecutionID)
				w.WriteHeader(404)
				fmt.Fprint(w, `{"error":"unknown_execution"}`)
				return
			}
			delete(a.reserved, req.ExecutionID)
			execs++
			a.note("execute " + req.ExecutionID)
			if r.Header.Get(wire.LeaseHeader) == wire.LeaseNext {
				// As an agent with "next-lease" does.
				a.n++
				reserves++
				id := fmt.Sprintf("exec_00000000-0000-4000-8000-%012d", a.n)
				a.reserved[id] = true
				a.note("reserve " + id)
				w.Header().Set(wire.NextLeaseHeader, fmt.Sprintf("%s %d", id, time.Now().Add(30*time.Second).UnixMilli()))
			}
			if a.hold != nil {
				// Bounded, so that a client that never takes a spare fails
				// the test rather than hanging it.
				stop := time.AfterFunc(5*time.Second, func() {
					a.mu.Lock()
					a.hold = nil
					a.cond.Broadcast()
					a.mu.Unlock()
				})
				for a.hold != nil && reserves < a.hold(execs) {
					a.cond.Wait()
				}
				stop.Stop()
			}
			fmt.Fprintln(w, `{"type":"result","exitCode":0,"timedOut":false,"durationMs":1,"stdoutTruncated":false,"stderrTruncated":false}`)
			// As the agent does: the result goes out on its own, the
			// stream's end after it.
			w.(http.Flusher).Flush()
			time.Sleep(time.Millisecond)
		}
	})})
}

// From its second command on, a client runs each command on a reservation
// taken while the previous one ran: one round trip per command.
func TestExecUsesSpareLease(t *testing.T) {
	a, ep := startLeaseAgent(t)
	a.hold = fromSecond
	c := client.New(ep)
	defer c.Close()
	runCalls(t, a, c, 5)
	if got := synchronousCalls(t, a); !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("commands %v reserved in their own call, want only 1 and 2:\n%s", got, strings.Join(a.log, "\n"))
	}
}

// A client whose agent sends the next spare with each answer (feature
// "next-lease") asks for it with every command, and never sends a
// reservation request of its own after its first.
func TestExecTakesNextLease(t *testing.T) {
	a, ep := startLeaseAgent(t)
	c := client.New(ep)
	defer c.Close()
	if _, err := c.AdmitRecord([]byte(`{"health":{"ok":true,"protocolVersion":2,"features":["next-lease"]}}`)); err != nil {
		t.Fatal(err)
	}
	runCalls(t, a, c, 5)
	time.Sleep(50 * time.Millisecond) // a background reservation would land by now
	if got := synchronousCalls(t, a); !slices.Equal(got, []int{1}) {
		t.Fatalf("commands %v reserved in their own call, want only 1:\n%s", got, strings.Join(a.log, "\n"))
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.requests != 1 {
		t.Fatalf("%d reservation requests, want 1:\n%s", a.requests, strings.Join(a.log, "\n"))
	}
}

// fromSecond is a leaseAgent hold: from the second execute on, the next
// spare is reserved before the command answers, so whether a spare is used
// never depends on timing.
func fromSecond(execs int) int {
	if execs < 2 {
		return 0
	}
	return execs + 1
}

// runCalls runs n commands, noting each call in the agent's log.
func runCalls(t *testing.T, a *leaseAgent, c *client.Client, n int) {
	for k := 1; k <= n; k++ {
		a.mu.Lock()
		a.note(fmt.Sprintf("call %d", k))
		a.mu.Unlock()
		if res, err := c.Exec(context.Background(), "true", client.ExecOptions{}); err != nil || res.ExitCode != 0 {
			t.Fatalf("exec %d: %+v %v", k, res, err)
		}
	}
}

// synchronousCalls lists the calls whose command ran on a reservation taken
// after the call began: the ones that paid a round trip for it.
func synchronousCalls(t *testing.T, a *leaseAgent) []int {
	a.mu.Lock()
	log := slices.Clone(a.log)
	a.mu.Unlock()
	reservedAt := map[string]int{}
	call := 0
	var synchronous []int
	for i, line := range log {
		kind, arg, _ := strings.Cut(line, " ")
		switch kind {
		case "call":
			call, _ = strconv.Atoi(arg)
		case "reserve":
			reservedAt[arg] = i
		case "execute":
			if reservedAt[arg] > slices.Index(log, fmt.Sprintf("call %d", call)) {
				synchronous = append(synchronous, call)
			}
		case "refused":
			t.Fatalf("an execute was refused: %v", log)
		}
	}
	return synchronous
}

// A client told a command is coming (Prefetch) runs even its first on a
// reservation taken ahead.
func TestPrefetchServesFirstCommand(t *testing.T) {
	a, ep := startLeaseAgent(t)
	a.hold = func(execs int) int { return execs + 1 }
	c := client.New(ep)
	defer c.Close()
	c.Prefetch()
	// The prefetch lands on the agent before the first call.
	a.mu.Lock()
	for a.n == 0 {
		a.cond.Wait()
	}
	a.mu.Unlock()
	runCalls(t, a, c, 3)
	if got := synchronousCalls(t, a); len(got) != 0 {
		t.Fatalf("commands %v reserved in their own call, want none:\n%s", got, strings.Join(a.log, "\n"))
	}
}

// A spare the agent has already let go of costs a retry, not a failure:
// the refused execute started nothing.
func TestExecRetriesStaleSpare(t *testing.T) {
	a, ep := startLeaseAgent(t)
	a.hold = fromSecond
	c := client.New(ep)
	defer c.Close()
	ctx := context.Background()
	for k := 0; k < 2; k++ {
		if _, err := c.Exec(ctx, "true", client.ExecOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	a.forget() // the spare expires on the agent
	a.mu.Lock()
	a.hold = nil
	a.mu.Unlock()
	if res, err := c.Exec(ctx, "true", client.ExecOptions{}); err != nil || res.ExitCode != 0 {
		t.Fatalf("exec on a stale spare: %+v %v", res, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	refused := 0
	for _, line := range a.log {
		if strings.HasPrefix(line, "refused ") {
			refused++
		}
	}
	if refused != 1 || !strings.HasPrefix(a.log[len(a.log)-1], "execute ") && !strings.HasPrefix(a.log[len(a.log)-2], "execute ") {
		t.Fatalf("want one refusal, then the command on a fresh reservation:\n%s", strings.Join(a.log, "\n"))
	}
}

// A ready record admits as healthz does: the same version check, and its
// spare runs the first command without a reservation round trip.
func TestAdmitRecord(t *testing.T) {
	a, ep := startLeaseAgent(t)
	c := client.New(ep)
	defer c.Close()
	for _, bad := range []string{`{"health":{"ok":true,"protocolVersion":1}}`, `{"health":`, ``} {
		if _, err := c.AdmitRecord([]byte(bad)); err == nil {
			t.Fatalf("record %q admitted", bad)
		}
	}
	if _, err := c.AdmitRecord([]byte(`{"health":{"ok":true,"protocolVersion":2},"spare":{"executionId":"../x"}}`)); err != nil {
		t.Fatalf("a record with a malformed spare: %v", err)
	}
	// The agent's own spare, as it would hand it over.
	a.mu.Lock()
	a.n++
	id := fmt.Sprintf("exec_00000000-0000-4000-8000-%012d", a.n)
	a.reserved[id] = true
	a.note("reserve " + id)
	a.mu.Unlock()
	rec := fmt.Sprintf(`{"health":{"ok":true,"protocolVersion":2,"bootId":"b1"},"spare":{"ok":true,"executionId":%q,"leaseExpiresAt":%d}}`, id, time.Now().Add(30*time.Second).UnixMilli())
	h, err := c.AdmitRecord([]byte(rec))
	if err != nil || h.BootID != "b1" {
		t.Fatalf("admit: %+v %v", h, err)
	}
	runCalls(t, a, c, 1)
	if got := synchronousCalls(t, a); len(got) != 0 {
		t.Fatalf("the first command reserved in its own call:\n%s", strings.Join(a.log, "\n"))
	}
	// A client's first command, often its only one, takes no next spare.
	time.Sleep(50 * time.Millisecond)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.n != 1 {
		t.Fatalf("%d reservations for one command run on the handed-over spare:\n%s", a.n, strings.Join(a.log, "\n"))
	}
}

// A finished stream's connection goes back to the pool: commands one after
// another reuse connections rather than dial one each.
func TestExecReusesConnections(t *testing.T) {
	a, ep := startLeaseAgent(t)
	c := client.New(ep)
	defer c.Close()
	for k := 0; k < 20; k++ {
		if _, err := c.Exec(context.Background(), "true", client.ExecOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond) // the stream's end is read in the background
	}
	// One for the commands, one for the spare taken while each runs.
	if n := a.conns.Load(); n > 3 {
		t.Fatalf("%d connections for 20 commands in a row", n)
	}
}

// A stream that never ends after its result (an agent gone wrong) neither
// holds the command's caller nor the connection for good.
func TestExecDoesNotWaitForStreamEnd(t *testing.T) {
	hold, held := make(chan struct{}), make(chan struct{})
	ep := serveOn(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case wire.RouteReserve:
			w.WriteHeader(201)
			fmt.Fprint(w, `{"ok":true,"protocolVersion":2,"executionId":"exec_00000000-0000-4000-8000-000000000001"}`)
		case wire.RouteExecute:
			fmt.Fprintln(w, `{"type":"result","exitCode":0,"timedOut":false,"durationMs":1,"stdoutTruncated":false,"stderrTruncated":false}`)
			w.(http.Flusher).Flush()
			close(held)
			<-hold
		}
	})})
	defer close(hold)
	c := client.New(ep)
	defer c.Close()
	type outcome struct {
		res *wire.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := c.Exec(context.Background(), "true", client.ExecOptions{})
		done <- outcome{res, err}
	}()
	select {
	case o := <-done:
		if o.err != nil || o.res.ExitCode != 0 {
			t.Fatalf("%+v %v", o.res, o.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Exec waited for the end of a stream that never ends")
	}
	<-held
}

// TestRequest: the /execute body carries the options as they are; what a
// JSON string would alter is refused, except stdin, which goes as base64.
func TestRequest(t *testing.T) {
	stdin := "\xff\x00"
	req, err := client.ExecOptions{Args: []string{"-c", "é"}, Env: map[string]string{"A": "b"}, Stdin: &stdin, Timeout: 500 * time.Microsecond, RawOutput: true}.Request("sh")
	if err != nil || req.Command != "sh" || len(req.Args) != 2 || req.TimeoutMs != 1 || req.StdinEncoding != wire.Base64 || *req.Stdin != "/wA=" || req.OutputEncoding != wire.Base64 {
		t.Fatalf("%+v %v", req, err)
	}
	for _, o := range []client.ExecOptions{
		{Args: []string{"ok", "\xff"}},
		{Cwd: "dir\xfe"},
		{Env: map[string]string{"A\xff": "b"}},
		{Env: map[string]string{"A": "\xc3"}},
	} {
		if _, err := o.Request("sh"); !errors.Is(err, client.ErrNotText) {
			t.Errorf("%+v: %v", o, err)
		}
	}
	if _, err := (client.ExecOptions{}).Request("sh\xff"); !errors.Is(err, client.ErrNotText) {
		t.Errorf("command: %v", err)
	}
}

// TestAnswerBound: an agent that answers a health check with more than any
// answer holds gets an error, not a host that reads all it sends.
func TestAnswerBound(t *testing.T) {
	c := client.New(serveOn(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := []byte(`{"ok":true,"pad":"` + strings.Repeat("x", 1<<20))
		for range 64 {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})}))
	defer c.Close()
	if _, err := c.Health(t.Context()); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("a 64 MiB health answer: %v", err)
	}
}

// TestDownloadNeedsLength: a file answer without its length (which could go
// on without end), or longer than the range asked for, is refused unread.
func TestDownloadNeedsLength(t *testing.T) {
	c := client.New(serveOn(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Range") != "" {
			w.Header().Set("Content-Length", "100")
			w.WriteHeader(http.StatusPartialContent)
			w.Write(make([]byte, 100))
			return
		}
		w.Write([]byte("chunk"))
		w.(http.Flusher).Flush() // no length: chunked
		w.Write([]byte("more"))
	})}))
	defer c.Close()
	var b bytes.Buffer
	if n, err := c.Download(t.Context(), "f", 0, 0, &b); err == nil || n != 0 || b.Len() != 0 {
		t.Errorf("an answer without a length: %d bytes, %v", n, err)
	}
	if n, err := c.Download(t.Context(), "f", 0, 10, &b); err == nil || n != 0 || b.Len() != 0 {
		t.Errorf("100 bytes for a 10-byte range: %d bytes, %v", n, err)
	}
}
