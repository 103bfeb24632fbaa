// Package client is the host side of the agent wire: a Go client for every
// route cordon-agent (and the reference worker) serves.
package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/cordon-sandbox/cordon/agent/wire"
)

// Endpoint says how to reach one agent.
type Endpoint struct {
	Network string // "unix" or "tcp"
	Address string // socket path, or host:port
	Token   string // bearer token; empty for an unauthenticated agent
	// Prefix is a URL path the agent's routes live under, for an agent
	// reached through a gateway (the daemon serves each sandbox's agent at
	// /v1/sandboxes/ID/agent); empty for an agent reached directly.
	Prefix string
}

// Client talks to one agent. It is safe for concurrent use.
type Client struct {
	ep   Endpoint
	base string
	hc   *http.Client
	// cancelWait bounds how long a cancel may take to be confirmed.
	cancelWait time.Duration
	// heartbeat is the interval /execute streams are asked to beat at
	// (feature "stream-heartbeat"); a stream silent for StallBeats of them
	// is taken for stalled.
	heartbeat time.Duration
	spare     spareLease
}

// MaxEventBytes bounds one NDJSON line read from an agent.
const MaxEventBytes = 4 << 20

// New returns a client for ep. It does not connect until first used.
func New(ep Endpoint) *Client {
	d := &net.Dialer{Timeout: 10 * time.Second}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, ep.Network, ep.Address)
		},
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 0, // /execute answers when it has spawned
		DisableCompression:    true,
	}
	base := "http://agent"
	if ep.Network == "tcp" {
		base = "http://" + ep.Address
	}
	base += ep.Prefix
	return &Client{ep: ep, base: base, hc: &http.Client{Transport: tr}, cancelWait: 30 * time.Second, heartbeat: DefaultHeartbeat}
}

// DefaultHeartbeat is the interval a Client asks /execute streams to beat
// at, and StallBeats how many silent intervals make a stream stalled: the
// stream is then dropped and the command's fate learnt through the cancel
// route, as for any broken stream.
const (
	DefaultHeartbeat = 10 * time.Second
	StallBeats       = 3
)

// SetHeartbeat changes the interval (1 to 60 s) for later commands.
func (c *Client) SetHeartbeat(d time.Duration) { c.heartbeat = d }

// NewGateway is a client of an agent reached through a gateway at base (the
// daemon's /v1/sandboxes/ID/agent URL) over rt, with token as its bearer
// credential (the daemon's key; empty on its unix socket).
func NewGateway(base, token string, rt http.RoundTripper) *Client {
	return &Client{ep: Endpoint{Token: token}, base: strings.TrimSuffix(base, "/"), hc: &http.Client{Transport: rt}, cancelWait: 30 * time.Second, heartbeat: DefaultHeartbeat}
}

// Close releases idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// Transport is the client's connection pool to the agent, for a caller
// that relays requests of its own (the daemon's proxy): sharing it reuses
// the connections the client has already opened.
func (c *Client) Transport() http.RoundTripper { return c.hc.Transport }

// Endpoint returns what the client dials.
func (c *Client) Endpoint() Endpoint { return c.ep }

// Error is a refusal from the agent: its HTTP status and wire error code.
type Error struct {
	Status  int
	Code    string
	Message string
	State   string
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("agent answered %d %s", e.Status, e.Code)
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

// ErrProtocolMismatch means the agent speaks a protocol version other than
// wire.ProtocolVersion, or none; it is never admitted.
var ErrProtocolMismatch = errors.New("agent protocol version mismatch")

// ErrIncompleteStream means the command's end was confirmed through the
// control route but its output stream broke first: output may be missing.
var ErrIncompleteStream = errors.New("execution stream ended early; outcome confirmed, output may be incomplete")

// ExecError is an execution that failed to start (the stream's error event).
type ExecError struct{ Message string }

func (e *ExecError) Error() string { return "execution failed: " + e.Message }

func (c *Client) do(ctx context.Context, method, route string, body any) (*http.Response, error) {
	return c.doWith(ctx, method, route, body, nil)
}

// doWith is do with extra request headers.
func (c *Client) doWith(ctx context.Context, method, route string, body any, h http.Header) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+route, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range h {
		req.Header[k] = v
	}
	c.auth(req)
	return c.hc.Do(req)
}

// call does a JSON request and decodes a 2xx JSON answer into out.
func (c *Client) call(ctx context.Context, route string, body, out any) error {
	resp, err := c.do(ctx, http.MethodPost, route, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return decode(resp, out)
}

// maxAnswerBytes bounds a JSON answer read whole (health, reservations,
// cancels, file-system listings of at most 10000 entries): the agent runs
// inside the sandbox, and one that is not what it should be must not make
// its host hold what it likes. File contents stream and are not bound by it.
const maxAnswerBytes = 16 << 20

func decode(resp *http.Response, out any) error {
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes+1))
	if err != nil {
		return err
	}
	if len(b) > maxAnswerBytes {
		return fmt.Errorf("agent answered more than %d bytes", maxAnswerBytes)
	}
	if resp.StatusCode/100 != 2 {
		return errorFrom(resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("agent answered malformed JSON: %w", err)
	}
	return nil
}

// AnswerError is the error an agent's non-2xx answer stands for, from its
// status and body, as every method of Client reports it.
func AnswerError(status int, body []byte) error { return errorFrom(status, body) }

func errorFrom(status int, b []byte) error {
	var eb struct {
		Error   string `json:"error"`
		Message string `json:"message"`
		State   string `json:"state"`
	}
	_ = json.Unmarshal(b, &eb)
	e := &Error{Status: status, Code: eb.Error, Message: eb.Message, State: eb.State}
	// File routes put a sentence in "error" rather than a code.
	if strings.ContainsAny(eb.Error, " :/") {
		e.Code, e.Message = "file_error", eb.Error
	}
	return e
}

// Health asks GET /healthz.
func (c *Client) Health(ctx context.Context) (*wire.Health, error) {
	var h wire.Health
	if err := c.get(ctx, wire.RouteHealthz, &h); err != nil {
		return nil, err
	}
	return &h, nil
}

// get asks GET route and decodes the JSON answer into out.
func (c *Client) get(ctx context.Context, route string, out any) error {
	resp, err := c.do(ctx, http.MethodGet, route, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return decode(resp, out)
}

// Admit checks that the agent is up and speaks exactly this release's
// protocol version.
func (c *Client) Admit(ctx context.Context) (*wire.Health, error) {
	h, err := c.Health(ctx)
	if err != nil {
		return nil, err
	}
	return c.admissible(h)
}

// admissible admits h's agent, and learns from it whether a command can
// ask for the next spare (see RunLeased).
func (c *Client) admissible(h *wire.Health) (*wire.Health, error) {
	if !h.OK || h.ProtocolVersion != wire.ProtocolVersion {
		return nil, fmt.Errorf("%w: agent reports version %d, this release speaks %d", ErrProtocolMismatch, h.ProtocolVersion, wire.ProtocolVersion)
	}
	c.spare.mu.Lock()
	c.spare.next = slices.Contains(h.Features, "next-lease")
	c.spare.mu.Unlock()
	return h, nil
}

// AdmitRecord admits the agent from the wire.ReadyRecord it handed its host
// at start, as Admit does from GET /healthz, and keeps the record's spare
// reservation for the first command (see Lease). A record that does not
// parse is an error; the caller may then Admit over the wire.
func (c *Client) AdmitRecord(record []byte) (*wire.Health, error) {
	var rec wire.ReadyRecord
	if err := json.Unmarshal(record, &rec); err != nil {
		return nil, fmt.Errorf("the agent's ready record: %w", err)
	}
	h, err := c.admissible(&rec.Health)
	if err != nil {
		return nil, err
	}
	if rec.Spare != nil && wire.ValidExecutionID(rec.Spare.ExecutionID) {
		c.spare.mu.Lock()
		c.keepLocked(rec.Spare, time.Now())
		c.spare.mu.Unlock()
	}
	return h, nil
}

// WaitReady polls Admit until it succeeds, ctx ends, or the agent reports a
// wrong version (which no amount of waiting fixes).
func (c *Client) WaitReady(ctx context.Context) (*wire.Health, error) {
	// Agents start in milliseconds: poll tightly at first, then back off.
	wait, tries := 500*time.Microsecond, 0
	for {
		h, err := c.Admit(ctx)
		if err == nil || errors.Is(err, ErrProtocolMismatch) {
			return h, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("agent not ready: %w (last error: %v)", ctx.Err(), err)
		case <-time.After(wait):
		}
		if tries++; tries > 200 {
			wait = min(wait*2, 50*time.Millisecond)
		}
	}
}

// Reserve takes an execution lease.
func (c *Client) Reserve(ctx context.Context) (*wire.Reservation, error) {
	return c.reserve(ctx, nil)
}

func (c *Client) reserve(ctx context.Context, h http.Header) (*wire.Reservation, error) {
	resp, err := c.doWith(ctx, http.MethodPost, wire.RouteReserve, struct{}{}, h)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r wire.Reservation
	if err := decode(resp, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Cancel stops a reserved or running execution and returns its confirmed
// terminal state.
func (c *Client) Cancel(ctx context.Context, id string) (*wire.Terminal, error) {
	var t wire.Terminal
	if err := c.call(ctx, wire.RouteCancel, wire.CancelRequest{ExecutionID: id}, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// Execute posts /execute and calls fn for every event until the stream ends.
// It is the raw route: it does not cancel anything when ctx ends.
func (c *Client) Execute(ctx context.Context, req wire.ExecuteRequest, fn func(wire.Event) error) error {
	return c.execute(ctx, req, nil, fn)
}

// execute is Execute with a command asking for the next spare (ask may be
// nil).
func (c *Client) execute(ctx context.Context, req wire.ExecuteRequest, ask *Ask, fn func(wire.Event) error) error {
	// The request outlives ctx by as much as Release needs once the
	// stream is over; until then, ctx ending aborts it.
	reqCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	h := ask.Header()
	if c.heartbeat > 0 {
		if h == nil {
			h = http.Header{}
		}
		h.Set(wire.HeartbeatHeader, strconv.FormatInt(c.heartbeat.Milliseconds(), 10))
	}
	resp, err := c.doWith(reqCtx, http.MethodPost, wire.RouteExecute, req, h)
	if err != nil {
		cancel()
		return err
	}
	if ms, err := strconv.ParseInt(resp.Header.Get(wire.HeartbeatHeader), 10, 64); err == nil && ms > 0 {
		// The agent beats: silence for StallBeats intervals is a stall.
		resp.Body = newStallReader(resp.Body, StallBeats*time.Duration(ms)*time.Millisecond)
	}
	if resp.StatusCode == http.StatusOK {
		ask.Answer(resp.Header)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		cancel()
		return errorFrom(resp.StatusCode, b)
	}
	if err := ReadEvents(resp.Body, fn); err != nil {
		resp.Body.Close()
		cancel()
		return err
	}
	stop()
	Release(resp.Body, cancel)
	return nil
}

// How much of a finished stream Release reads, and for how long.
const (
	drainBytes = 64 << 10
	drainWait  = time.Second
)

// Release ends a response whose NDJSON stream is over (its result or error
// event came). net/http keeps a connection for reuse only once its body has
// been read to the end, and the end of a stream (the chunked encoding's last
// chunk) follows its last event at once: Release reads it in the background,
// then closes the body. cancel must end the request's context: it bounds the
// wait to drainWait (and drainBytes), past which the connection is dropped.
func Release(body io.ReadCloser, cancel context.CancelFunc) {
	go func() {
		t := time.AfterFunc(drainWait, cancel)
		_, _ = io.Copy(io.Discard, io.LimitReader(body, drainBytes))
		t.Stop()
		body.Close()
		cancel()
	}()
}

// ReadEvents reads an /execute NDJSON stream (events of at most
// MaxEventBytes), calling fn for each until the result or error event.
// A stream that ends before either is io.ErrUnexpectedEOF.
func ReadEvents(r io.Reader, fn func(wire.Event) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var line []byte
	for {
		chunk, isPrefix, err := br.ReadLine()
		if err != nil {
			if err == io.EOF && len(line) == 0 {
				return io.ErrUnexpectedEOF
			}
			return err
		}
		line = append(line, chunk...)
		if len(line) > MaxEventBytes {
			return fmt.Errorf("agent sent an event over %d bytes", MaxEventBytes)
		}
		if isPrefix {
			continue
		}
		var ev wire.Event
		if err := DecodeEvent(line, &ev); err != nil {
			return fmt.Errorf("agent sent a malformed event: %w", err)
		}
		line = line[:0]
		if err := fn(ev); err != nil {
			return err
		}
		if ev.Type == wire.EventResult || ev.Type == wire.EventError {
			return nil
		}
	}
}

// ExecOptions shapes one command.
type ExecOptions struct {
	Args  []string
	Cwd   string
	Env   map[string]string
	Stdin *string
	// RetainOutput keeps the command's output in the agent (that many
	// bytes; 0 none) for ExecutionOutput to read back from any
	// connection, by the execution's id, until its record expires
	// (feature "retained-output").
	RetainOutput int64
	// StdinStream, instead of Stdin, is read while the command runs and
	// passed on as it arrives, with backpressure (each chunk is written
	// to the command's stdin before the next is read), then closed at its
	// end of file (feature "stdin-end"): unbounded input, in constant
	// memory. Output then comes as raw bytes.
	StdinStream    io.Reader
	Timeout        time.Duration // 0: the agent's default
	MaxOutputBytes int64         // 0: the agent's default
	Stdout, Stderr io.Writer     // nil discards
	// RawOutput gives Stdout and Stderr the exact bytes the command wrote
	// (feature "output-base64"); otherwise they get UTF-8 text, in which
	// bytes that are not UTF-8 arrive as U+FFFD.
	RawOutput bool
}

// EncodeStdin returns stdin as /execute carries it, with its encoding: as
// it is when it is UTF-8, which is all a JSON string holds; otherwise as
// base64 with wire.Base64 (feature "stdin-base64"), so that no byte
// is replaced on the way.
func EncodeStdin(stdin *string) (*string, string) {
	if !StdinNeedsBase64(stdin) {
		return stdin, ""
	}
	enc := base64.StdEncoding.EncodeToString([]byte(*stdin))
	return &enc, wire.Base64
}

// StdinNeedsBase64 reports whether EncodeStdin sends stdin as base64.
func StdinNeedsBase64(stdin *string) bool { return stdin != nil && !utf8.ValidString(*stdin) }

// ErrNotText: a command, argument, variable or directory that is not UTF-8,
// which a JSON string would alter on the way (stdin has a way through:
// EncodeStdin).
var ErrNotText = errors.New("not UTF-8, which the wire's JSON strings cannot carry")

// Request is the /execute body for command with o's settings. It refuses
// with ErrNotText what would not arrive as it was.
func (o ExecOptions) Request(command string) (wire.ExecuteRequest, error) {
	req := wire.ExecuteRequest{Command: command, Args: o.Args, Cwd: o.Cwd, Env: o.Env, MaxOutputBytes: o.MaxOutputBytes}
	if o.RetainOutput > 0 {
		req.RetainOutput = o.RetainOutput
	}
	check := func(what, s string) error {
		if !utf8.ValidString(s) {
			return fmt.Errorf("%s %q: %w", what, s, ErrNotText)
		}
		return nil
	}
	err := errors.Join(check("command", command), check("cwd", o.Cwd))
	for i, a := range o.Args {
		err = errors.Join(err, check(fmt.Sprintf("args[%d]", i), a))
	}
	for k, v := range o.Env {
		err = errors.Join(err, check("environment variable", k), check("value of "+k, v))
	}
	if err != nil {
		return req, err
	}
	req.Stdin, req.StdinEncoding = EncodeStdin(o.Stdin)
	if o.RawOutput {
		req.OutputEncoding = wire.Base64
	}
	if o.Timeout > 0 {
		req.TimeoutMs = max(1, o.Timeout.Milliseconds())
	}
	return req, nil
}

// WriteOutput writes an output event's data to w: the text as it is, or,
// for a command whose output was asked for raw (wire.ExecuteRequest's
// OutputEncoding), the bytes its base64 stands for. Data that is not
// base64 there is an ErrBadOutput.
func WriteOutput(w io.Writer, data string, raw bool) error {
	if !raw {
		_, err := io.WriteString(w, data)
		return err
	}
	b, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadOutput, err)
	}
	_, err = w.Write(b)
	return err
}

// ErrBadOutput: an output event asked for as base64 was not.
var ErrBadOutput = errors.New("output event is not the base64 asked for")

// ignoreWriteErr keeps only WriteOutput's ErrBadOutput: the caller's
// writer failing does not stop the command or its stream.
func ignoreWriteErr(err error) error {
	if errors.Is(err, ErrBadOutput) {
		return err
	}
	return nil
}

// Exec runs command to completion and streams its output. The command is
// reserved first (with a spare reservation when the client holds one, see
// Lease), so that when ctx ends it is cancelled over the wire and
// Exec returns only once the agent confirms it stopped (with the confirmed
// result and an error wrapping ctx.Err()). Dropping the stream is never
// mistaken for stopping the command.
func (c *Client) Exec(ctx context.Context, command string, o ExecOptions) (*wire.Result, error) {
	req, err := o.Request(command)
	if err != nil {
		return nil, err
	}
	if o.StdinStream != nil {
		if o.Stdin != nil {
			return nil, errors.New("ExecOptions: Stdin and StdinStream are exclusive")
		}
		req.Stdio = true
	}
	var res *wire.Result
	_, err = c.RunLeased(ctx, func(id string, ask *Ask) error {
		req.ExecutionID = id
		var err error
		res, err = c.exec(ctx, req, o, ask)
		return err
	})
	return res, err
}

// exec runs a reserved command for Exec.
func (c *Client) exec(ctx context.Context, req wire.ExecuteRequest, o ExecOptions, ask *Ask) (*wire.Result, error) {
	type outcome struct {
		result *wire.Result
		err    error
	}
	done := make(chan outcome, 1)
	// The stream lives until the agent ends it, not until ctx does.
	streamCtx, stopStream := context.WithCancel(context.WithoutCancel(ctx))
	defer stopStream()
	go func() {
		var result *wire.Result
		err := c.execute(streamCtx, req, ask, func(ev wire.Event) error {
			switch ev.Type {
			case wire.EventStdioStarted:
				if o.StdinStream != nil {
					go c.pumpStdin(streamCtx, req.ExecutionID, o.StdinStream)
				}
			case wire.EventStdioData:
				w := o.Stdout
				if ev.Stream == "stderr" {
					w = o.Stderr
				}
				if w != nil {
					return ignoreWriteErr(WriteOutput(w, ev.Data, true))
				}
			case wire.EventStdout:
				if o.Stdout != nil {
					return ignoreWriteErr(WriteOutput(o.Stdout, ev.Data, o.RawOutput))
				}
			case wire.EventStderr:
				if o.Stderr != nil {
					return ignoreWriteErr(WriteOutput(o.Stderr, ev.Data, o.RawOutput))
				}
			case wire.EventResult:
				result = ev.Result
			case wire.EventError:
				return &ExecError{Message: ev.Error}
			}
			return nil
		})
		done <- outcome{result, err}
	}()

	select {
	case out := <-done:
		if out.err == nil && out.result != nil {
			return out.result, nil
		}
		var ee *ExecError
		var ae *Error
		if errors.As(out.err, &ee) || errors.As(out.err, &ae) {
			return nil, out.err
		}
		// The stream broke: learn the command's fate through the control route.
		t, err := c.confirmStop(req.ExecutionID)
		if err != nil {
			return nil, fmt.Errorf("execution stream failed (%v) and its stop could not be confirmed: %w", out.err, err)
		}
		return t.Result, fmt.Errorf("%w (%v)", ErrIncompleteStream, out.err)
	case <-ctx.Done():
		t, err := c.confirmStop(req.ExecutionID)
		if err != nil {
			return nil, fmt.Errorf("cancelling: %w (stop not confirmed: %v)", ctx.Err(), err)
		}
		// Let the stream deliver the output written before the stop.
		select {
		case out := <-done:
			if out.result != nil {
				return out.result, fmt.Errorf("command cancelled: %w", ctx.Err())
			}
		case <-time.After(2 * time.Second):
		}
		return t.Result, fmt.Errorf("command cancelled: %w", ctx.Err())
	}
}

func (c *Client) confirmStop(id string) (*wire.Terminal, error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cancelWait)
	defer cancel()
	return c.Cancel(ctx, id)
}

// stdinChunk is the most of a stream's input one write carries: well
// inside StdioWriteMaxChars once in base64.
const stdinChunk = 256 << 10

// pumpStdin passes r to a stdio-mode execution's stdin, chunk by chunk,
// then ends it. It stops quietly when the command no longer takes input
// (it exited, or closed its stdin).
func (c *Client) pumpStdin(ctx context.Context, id string, r io.Reader) {
	buf := make([]byte, stdinChunk)
	for {
		n, err := r.Read(buf)
		end := err != nil
		if n > 0 || end {
			werr := c.call(ctx, wire.RouteStdioWrite, wire.StdioWriteRequest{ExecutionID: id, Data: base64.StdEncoding.EncodeToString(buf[:n]), End: end}, &wire.StdioWriteResponse{})
			if werr != nil {
				return
			}
		}
		if end {
			return
		}
	}
}

// StdioWrite delivers bytes to a stdio-mode execution's stdin.
func (c *Client) StdioWrite(ctx context.Context, id string, data []byte) error {
	var r wire.StdioWriteResponse
	return c.call(ctx, wire.RouteStdioWrite, wire.StdioWriteRequest{ExecutionID: id, Data: base64.StdEncoding.EncodeToString(data)}, &r)
}

// HasFeature reports whether the agent's healthz lists feature.
func (c *Client) HasFeature(ctx context.Context, feature string) bool {
	h, err := c.Health(ctx)
	if err != nil {
		return false
	}
	for _, f := range h.Features {
		if f == feature {
			return true
		}
	}
	return false
}

func (c *Client) auth(req *http.Request) {
	if c.ep.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.ep.Token)
	}
}

// stallReader closes a body that yields nothing for limit, so that a read
// waiting on a stalled stream fails (ErrStalled) rather than waiting on.
type stallReader struct {
	io.ReadCloser
	timer   *time.Timer
	limit   time.Duration
	stalled atomic.Bool
}

// ErrStalled: an /execute stream whose agent promised heartbeats went
// silent for StallBeats of them.
var ErrStalled = errors.New("the agent's stream stalled (no heartbeat)")

func newStallReader(body io.ReadCloser, limit time.Duration) *stallReader {
	s := &stallReader{ReadCloser: body, limit: limit}
	s.timer = time.AfterFunc(limit, func() {
		s.stalled.Store(true)
		body.Close()
	})
	return s
}

func (s *stallReader) Read(p []byte) (int, error) {
	n, err := s.ReadCloser.Read(p)
	if n > 0 {
		s.timer.Reset(s.limit)
	}
	if err != nil && s.stalled.Load() {
		return n, ErrStalled
	}
	return n, err
}

func (s *stallReader) Close() error {
	s.timer.Stop()
	return s.ReadCloser.Close()
}
