// Package client is the Go client of cordon's REST API (`cordon serve`).
// Every method takes a context first; refusals come back as *api.Error with
// the daemon's stable code, which errors.Is matches against the Err*
// sentinels below.
package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	agentclient "github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/agent/wire"
	"github.com/cordon-sandbox/cordon/server/api"
)

// DefaultSocket is where `cordon serve` listens unless told otherwise.
const DefaultSocket = "/run/cordon/cordon.sock"

// Client talks to one daemon. It is safe for concurrent use.
type Client struct {
	base string
	key  string
	hc   *http.Client
}

// New returns a client for host: "unix:///path/to.sock", a bare socket
// path, "http://host:port" or "https://host:port". key may be empty on the
// unix socket.
func New(host, key string) (*Client, error) {
	tr := &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second, DisableCompression: true}
	c := &Client{key: key, hc: &http.Client{Transport: tr}}
	switch {
	case strings.HasPrefix(host, "unix://") || strings.HasPrefix(host, "/"):
		sock := strings.TrimPrefix(host, "unix://")
		d := &net.Dialer{Timeout: 10 * time.Second}
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) { return d.DialContext(ctx, "unix", sock) }
		c.base = "http://cordon"
	case strings.HasPrefix(host, "http://") || strings.HasPrefix(host, "https://"):
		c.base = strings.TrimSuffix(host, "/")
	case strings.HasPrefix(host, "tcp://"):
		c.base = "http://" + strings.TrimPrefix(host, "tcp://")
	default:
		return nil, fmt.Errorf("cordon host %q: want unix:///path, /path, tcp://host:port or http(s)://host:port", host)
	}
	return c, nil
}

// NewTransport returns a client that sends every request through rt, as
// base (for example "http://cordon"): a front end served inside the
// daemon's own process reaches the daemon so.
func NewTransport(base, key string, rt http.RoundTripper) *Client {
	return &Client{base: strings.TrimSuffix(base, "/"), key: key, hc: &http.Client{Transport: rt}}
}

// FromEnvironment is New with CORDON_HOST (default: the default socket)
// and CORDON_API_KEY.
func FromEnvironment() (*Client, error) {
	host := os.Getenv("CORDON_HOST")
	if host == "" {
		host = DefaultSocket
	}
	return New(host, os.Getenv("CORDON_API_KEY"))
}

// Sentinels for errors.Is on an *api.Error.
var (
	ErrNotFound     = &api.Error{Code: api.CodeNotFound}
	ErrUnauthorized = &api.Error{Code: api.CodeUnauthorized}
	ErrForbidden    = &api.Error{Code: api.CodeForbidden}
	ErrInvalid      = &api.Error{Code: api.CodeInvalid}
	ErrQuota        = &api.Error{Code: api.CodeQuota}
	ErrUnsupported  = &api.Error{Code: api.CodeUnsupported}
	ErrPaused       = &api.Error{Code: api.CodePaused}
)

// Error is the API's refusal; errors.Is(err, client.ErrNotFound) and the
// like compare codes.
type Error = api.Error

func isCode(err error, target *api.Error) bool {
	var e *api.Error
	return errors.As(err, &e) && e.Code == target.Code
}

// IsNotFound reports whether err is the daemon's not_found.
func IsNotFound(err error) bool { return isCode(err, ErrNotFound) }

// Is reports whether err carries the code of target (one of the Err*
// sentinels).
func Is(err error, target *api.Error) bool { return isCode(err, target) }

func (c *Client) request(ctx context.Context, method, path string, body io.Reader, size int64) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.ContentLength = size
	}
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	return req, nil
}

func (c *Client) do(req *http.Request) (*http.Response, error) {
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, readError(resp)
	}
	return resp, nil
}

func readError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &api.Error{Status: resp.StatusCode}
	if json.Unmarshal(b, e) != nil || e.Code == "" {
		e.Code, e.Message = http.StatusText(resp.StatusCode), strings.TrimSpace(string(b))
	}
	return e
}

// call sends a JSON body (nil for none) and decodes a JSON answer into out
// (nil to discard).
func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	size := int64(0)
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body, size = bytes.NewReader(b), int64(len(b))
	}
	req, err := c.request(ctx, method, path, body, size)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		return nil
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(out)
}

// Seed makes a seed's git repositories present in a sandbox, cloning only
// what is missing; drift is an *api.Error with code seed_drift (409), and
// nothing was touched.
func (c *Client) Seed(ctx context.Context, id string, req api.SeedRequest) (*api.SeedResult, error) {
	var out api.SeedResult
	return &out, c.call(ctx, http.MethodPost, sbPath(id, "/seed"), req, &out)
}

// Snapshot captures a sandbox's writable state (ttl zero: none).
func (c *Client) Snapshot(ctx context.Context, id string, ttl time.Duration) (*api.Snapshot, error) {
	var out api.Snapshot
	return &out, c.call(ctx, http.MethodPost, sbPath(id, "/snapshot"), api.SnapshotRequest{TTLSeconds: int64(ttl / time.Second)}, &out)
}

// Snapshots lists the caller's snapshots.
func (c *Client) Snapshots(ctx context.Context) ([]api.Snapshot, error) {
	var out api.SnapshotList
	return out.Snapshots, c.call(ctx, http.MethodGet, "/v1/snapshots", nil, &out)
}

// GetSnapshot describes a snapshot.
func (c *Client) GetSnapshot(ctx context.Context, sid string) (*api.Snapshot, error) {
	var out api.Snapshot
	return &out, c.call(ctx, http.MethodGet, "/v1/snapshots/"+url.PathEscape(sid), nil, &out)
}

// DeleteSnapshot deletes a snapshot.
func (c *Client) DeleteSnapshot(ctx context.Context, sid string) error {
	return c.call(ctx, http.MethodDelete, "/v1/snapshots/"+url.PathEscape(sid), nil, nil)
}

// Fork makes n sandboxes from a sandbox's current state.
func (c *Client) Fork(ctx context.Context, id string, req api.ForkRequest) ([]api.Sandbox, error) {
	var out api.ForkResult
	return out.Sandboxes, c.call(ctx, http.MethodPost, sbPath(id, "/fork"), req, &out)
}

// ExportSnapshot writes a snapshot's export (a tar) to w.
func (c *Client) ExportSnapshot(ctx context.Context, sid string, w io.Writer) error {
	req, err := c.request(ctx, http.MethodGet, "/v1/snapshots/"+url.PathEscape(sid)+"/export", nil, 0)
	if err != nil {
		return err
	}
	resp, err := c.do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(w, resp.Body)
	return err
}

// ImportSnapshot makes an exported snapshot (read from r) the caller's.
func (c *Client) ImportSnapshot(ctx context.Context, r io.Reader) (*api.Snapshot, error) {
	req, err := c.request(ctx, http.MethodPost, "/v1/snapshots/import", r, -1)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-tar")
	resp, err := c.do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out api.Snapshot
	return &out, json.NewDecoder(resp.Body).Decode(&out)
}

// PutTemplate saves a template under name.
func (c *Client) PutTemplate(ctx context.Context, name string, t api.Template) (*api.Template, error) {
	var out api.Template
	return &out, c.call(ctx, http.MethodPut, "/v1/templates/"+url.PathEscape(name), t, &out)
}

// Templates lists the caller's templates.
func (c *Client) Templates(ctx context.Context) ([]api.Template, error) {
	var out api.TemplateList
	return out.Templates, c.call(ctx, http.MethodGet, "/v1/templates", nil, &out)
}

// DeleteTemplate deletes a template.
func (c *Client) DeleteTemplate(ctx context.Context, name string) error {
	return c.call(ctx, http.MethodDelete, "/v1/templates/"+url.PathEscape(name), nil, nil)
}

// Call sends in as JSON to a route of the daemon's API (method and path,
// for example POST /v1/runs) and decodes its answer into out; a refusal is
// an *api.Error.
func (c *Client) Call(ctx context.Context, method, path string, in, out any) error {
	return c.call(ctx, method, path, in, out)
}

func sbPath(id string, rest string) string { return "/v1/sandboxes/" + url.PathEscape(id) + rest }

// Create creates a sandbox and returns it running.
func (c *Client) Create(ctx context.Context, req api.CreateRequest) (*api.Sandbox, error) {
	var out api.Sandbox
	return &out, c.call(ctx, http.MethodPost, "/v1/sandboxes", req, &out)
}

// Get describes a sandbox.
func (c *Client) Get(ctx context.Context, id string) (*api.Sandbox, error) {
	var out api.Sandbox
	return &out, c.call(ctx, http.MethodGet, sbPath(id, ""), nil, &out)
}

// Update gives a sandbox a new TTL counted from now, a new idle timeout,
// or both (PATCH /v1/sandboxes/{id}).
func (c *Client) Update(ctx context.Context, id string, req api.UpdateRequest) (*api.Sandbox, error) {
	var out api.Sandbox
	return &out, c.call(ctx, http.MethodPatch, sbPath(id, ""), req, &out)
}

// Metrics reads what a running sandbox uses now, against its limits
// (GET /v1/sandboxes/{id}/metrics).
func (c *Client) Metrics(ctx context.Context, id string) (*api.Metrics, error) {
	var out api.Metrics
	return &out, c.call(ctx, http.MethodGet, sbPath(id, "/metrics"), nil, &out)
}

// MetricsHistory is the daemon's readings of a sandbox's metrics from
// start to end (zero times: from its create, to now).
func (c *Client) MetricsHistory(ctx context.Context, id string, start, end time.Time) (*api.MetricsHistory, error) {
	q := url.Values{}
	if !start.IsZero() {
		q.Set("start", start.UTC().Format(time.RFC3339Nano))
	}
	if !end.IsZero() {
		q.Set("end", end.UTC().Format(time.RFC3339Nano))
	}
	route := sbPath(id, "/metrics/history")
	if len(q) > 0 {
		route += "?" + q.Encode()
	}
	var out api.MetricsHistory
	return &out, c.call(ctx, http.MethodGet, route, nil, &out)
}

// FileURL asks for a URL of the daemon that reads (method GET) or writes
// (PUT) path of sandbox id without a key, for expires (0: an hour).
func (c *Client) FileURL(ctx context.Context, id, path, method string, expires time.Duration) (*api.FileURL, error) {
	var out api.FileURL
	req := api.FileURLRequest{Path: path, Method: method, ExpiresInSeconds: int((expires + time.Second - 1) / time.Second)}
	return &out, c.call(ctx, http.MethodPost, sbPath(id, "/file-urls"), req, &out)
}

// ListOptions filter List.
type ListOptions struct {
	State  string
	Labels map[string]string
}

// List lists the caller's sandboxes.
func (c *Client) List(ctx context.Context, o ListOptions) ([]api.Sandbox, error) {
	q := url.Values{}
	if o.State != "" {
		q.Set("state", o.State)
	}
	for k, v := range o.Labels {
		q.Add("label", k+"="+v)
	}
	path := "/v1/sandboxes"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out api.List
	return out.Sandboxes, c.call(ctx, http.MethodGet, path, nil, &out)
}

// Delete destroys a sandbox and returns once teardown is confirmed.
func (c *Client) Delete(ctx context.Context, id string) error {
	return c.call(ctx, http.MethodDelete, sbPath(id, ""), nil, nil)
}

// ExecOptions shape one command.
type ExecOptions struct {
	Args    []string
	Cwd     string
	Env     map[string]string
	Stdin   *string
	Timeout time.Duration
	// MaxOutputBytes bounds each of stdout and stderr (the agent's default
	// when zero).
	MaxOutputBytes int64
	// Stdout and Stderr receive the output as it arrives; nil discards.
	Stdout, Stderr io.Writer
	// Started, if set, is called with the execution id before any output,
	// so the caller can Cancel it.
	Started func(executionID string)
	// RawOutput gives Stdout and Stderr the exact bytes the command wrote
	// (the agent's feature "output-base64"); otherwise UTF-8 text, in which
	// bytes that are not UTF-8 arrive as U+FFFD.
	RawOutput bool
	// StdinStream, instead of Stdin, streams the command's input as it
	// arrives and then ends it (the agent's feature "stdin-end"). Such a
	// command runs through the sandbox's agent wire (Agent): ending ctx
	// then stops it, confirmed, and Started is not called.
	StdinStream io.Reader
}

// Exec runs a command and streams its output. Ending ctx drops the stream
// but does not stop the command (Cancel does), unless StdinStream is set.
func (c *Client) Exec(ctx context.Context, id, command string, o ExecOptions) (*wire.Result, error) {
	if o.StdinStream != nil {
		ac := c.Agent(id)
		defer ac.Close()
		return ac.Exec(ctx, command, agentclient.ExecOptions{Args: o.Args, Cwd: o.Cwd, Env: o.Env, StdinStream: o.StdinStream,
			Timeout: o.Timeout, MaxOutputBytes: o.MaxOutputBytes, Stdout: o.Stdout, Stderr: o.Stderr, RawOutput: true})
	}
	body, err := agentclient.ExecOptions{Args: o.Args, Cwd: o.Cwd, Env: o.Env, Stdin: o.Stdin, Timeout: o.Timeout, MaxOutputBytes: o.MaxOutputBytes, RawOutput: o.RawOutput}.Request(command)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	// The request outlives ctx by as much as agentclient.Release needs once
	// the stream is over; until then, ctx ending aborts it.
	reqCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	req, err := c.request(reqCtx, http.MethodPost, sbPath(id, "/exec"), bytes.NewReader(b), int64(len(b)))
	if err != nil {
		cancel()
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.do(req)
	if err != nil {
		cancel()
		return nil, err
	}
	if o.Started != nil {
		o.Started(resp.Header.Get(api.ExecutionHeader))
	}
	var res *wire.Result
	err = agentclient.ReadEvents(resp.Body, func(ev wire.Event) error {
		var w io.Writer
		switch ev.Type {
		case wire.EventStdout:
			w = o.Stdout
		case wire.EventStderr:
			w = o.Stderr
		case wire.EventResult:
			res = ev.Result
		case wire.EventError:
			return fmt.Errorf("execution failed: %s", ev.Error)
		}
		if w != nil {
			return agentclient.WriteOutput(w, ev.Data, o.RawOutput)
		}
		return nil
	})
	if err != nil {
		resp.Body.Close()
		cancel()
		return nil, err
	}
	stop()
	agentclient.Release(resp.Body, cancel)
	if res == nil {
		return nil, errors.New("exec stream ended without a result")
	}
	return res, nil
}

// Cancel stops an execution and returns the agent's confirmed terminal
// state.
func (c *Client) Cancel(ctx context.Context, id, executionID string) (*wire.Terminal, error) {
	var out wire.Terminal
	return &out, c.call(ctx, http.MethodPost, sbPath(id, "/executions/"+url.PathEscape(executionID)+"/cancel"), nil, &out)
}

func filePath(id, route, path string, extra url.Values) string {
	q := url.Values{"path": {path}}
	for k, v := range extra {
		q[k] = v
	}
	return sbPath(id, route) + "?" + q.Encode()
}

// Download copies a file to w; with length > 0 only that many bytes from
// offset. It returns the bytes copied.
func (c *Client) Download(ctx context.Context, id, path string, offset, length int64, w io.Writer) (int64, error) {
	req, err := c.request(ctx, http.MethodGet, filePath(id, "/files", path, nil), nil, 0)
	if err != nil {
		return 0, err
	}
	if offset > 0 || length > 0 {
		end := ""
		if length > 0 {
			end = strconv.FormatInt(offset+length-1, 10)
		}
		req.Header.Set("Range", "bytes="+strconv.FormatInt(offset, 10)+"-"+end)
	}
	resp, err := c.do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(w, resp.Body)
	if err == nil && resp.ContentLength >= 0 && n != resp.ContentLength {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// Upload replaces a file with size bytes from r, atomically.
func (c *Client) Upload(ctx context.Context, id, path string, r io.Reader, size int64) error {
	return c.UploadMode(ctx, id, path, r, size, -1)
}

// UploadMode is Upload giving the file the permission bits perm (0-0777;
// -1 as Upload: an existing file's, else the default).
func (c *Client) UploadMode(ctx context.Context, id, path string, r io.Reader, size int64, perm int) error {
	var extra url.Values
	if perm >= 0 {
		extra = url.Values{"mode": {strconv.FormatUint(uint64(perm&0o777), 8)}}
	}
	req, err := c.request(ctx, http.MethodPut, filePath(id, "/files", path, extra), io.NopCloser(r), size)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := c.do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// Stat describes a file.
func (c *Client) Stat(ctx context.Context, id, path string) (*wire.FileInfo, error) {
	var out wire.FileInfo
	return &out, c.call(ctx, http.MethodGet, filePath(id, "/stat", path, nil), nil, &out)
}

// ListDir lists a directory.
func (c *Client) ListDir(ctx context.Context, id, path string) (*wire.ListResponse, error) {
	var out wire.ListResponse
	return &out, c.call(ctx, http.MethodGet, filePath(id, "/dir", path, nil), nil, &out)
}

// Mkdir creates a directory and its parents.
func (c *Client) Mkdir(ctx context.Context, id, path string) error {
	return c.call(ctx, http.MethodPost, filePath(id, "/dir", path, nil), nil, nil)
}

// Rename moves path to to inside the sandbox, replacing a file there, and
// describes it where it now is.
func (c *Client) Rename(ctx context.Context, id, path, to string) (*wire.FileInfo, error) {
	var out wire.FileInfo
	return &out, c.call(ctx, http.MethodPost, filePath(id, "/rename", path, url.Values{"to": {to}}), nil, &out)
}

// Remove removes a path; recursive for a directory tree.
func (c *Client) Remove(ctx context.Context, id, path string, recursive bool) error {
	var extra url.Values
	if recursive {
		extra = url.Values{"recursive": {"1"}}
	}
	return c.call(ctx, http.MethodDelete, filePath(id, "/files", path, extra), nil, nil)
}

// SetNetworkPolicy replaces the sandbox's egress policy.
func (c *Client) SetNetworkPolicy(ctx context.Context, id string, p api.Egress) (*api.Sandbox, error) {
	var out api.Sandbox
	return &out, c.call(ctx, http.MethodPut, sbPath(id, "/network-policy"), p, &out)
}

// Pause freezes the sandbox; Resume thaws it.
func (c *Client) Pause(ctx context.Context, id string) (*api.Sandbox, error) {
	var out api.Sandbox
	return &out, c.call(ctx, http.MethodPost, sbPath(id, "/pause"), nil, &out)
}

// Suspend stops everything a sandbox with a persistent workspace runs and
// gives its compute back, keeping the workspace, until Resume.
func (c *Client) Suspend(ctx context.Context, id string) (*api.Sandbox, error) {
	var out api.Sandbox
	return &out, c.call(ctx, http.MethodPost, sbPath(id, "/suspend"), nil, &out)
}

// Resume thaws a paused sandbox, or starts a suspended one again.
func (c *Client) Resume(ctx context.Context, id string) (*api.Sandbox, error) {
	var out api.Sandbox
	return &out, c.call(ctx, http.MethodPost, sbPath(id, "/resume"), nil, &out)
}

// AgentURL is the base URL of the sandbox's agent wire through the daemon;
// an agent-protocol client uses it with the daemon key as its token.
func (c *Client) AgentURL(id string) string { return c.base + sbPath(id, "/agent") }

// Agent is a client of the sandbox's agent wire through the daemon (its
// routes at AgentURL, this client's key as the token): for what the agent
// offers beyond the REST API's own routes (sessions).
func (c *Client) Agent(id string) *agentclient.Client {
	return agentclient.NewGateway(c.AgentURL(id), c.key, c.hc.Transport)
}

// Transport is the HTTP transport the client dials the daemon with (for an
// agent-protocol client pointed at AgentURL over the unix socket).
func (c *Client) Transport() http.RoundTripper { return c.hc.Transport }

// Events streams the caller's lifecycle events to fn until ctx ends, the
// stream ends, or fn returns an error.
func (c *Client) Events(ctx context.Context, fn func(api.Event) error) error {
	resp, err := c.subscribe(ctx)
	if err != nil {
		return err
	}
	return readEvents(ctx, resp, fn)
}

// Subscribe is Events returning once the daemon holds the subscription,
// so that every event after the call reaches fn; the stream is read in the
// background until ctx ends or fn fails, and done then says why.
func (c *Client) Subscribe(ctx context.Context, fn func(api.Event) error) (done <-chan error, err error) {
	resp, err := c.subscribe(ctx)
	if err != nil {
		return nil, err
	}
	ch := make(chan error, 1)
	go func() { ch <- readEvents(ctx, resp, fn) }()
	return ch, nil
}

// subscribe opens the event stream: the daemon subscribes before it
// answers.
func (c *Client) subscribe(ctx context.Context) (*http.Response, error) {
	req, err := c.request(ctx, http.MethodGet, "/v1/events", nil, 0)
	if err != nil {
		return nil, err
	}
	return c.do(req)
}

func readEvents(ctx context.Context, resp *http.Response, fn func(api.Event) error) error {
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev api.Event
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			return fmt.Errorf("malformed event: %w", err)
		}
		if err := fn(ev); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil && ctx.Err() == nil {
		return err
	}
	return ctx.Err()
}

// CreateKey makes an API key for tenant (admin only); the answer carries
// the secret, which is never shown again.
func (c *Client) CreateKey(ctx context.Context, req api.KeyRequest) (*api.Key, error) {
	var out api.Key
	return &out, c.call(ctx, http.MethodPost, "/v1/keys", req, &out)
}

// Keys lists the API keys, without their secrets (admin only).
func (c *Client) Keys(ctx context.Context) ([]api.Key, error) {
	var out struct {
		Keys []api.Key `json:"keys"`
	}
	return out.Keys, c.call(ctx, http.MethodGet, "/v1/keys", nil, &out)
}

// DeleteKey revokes a key (admin only).
func (c *Client) DeleteKey(ctx context.Context, keyID string) error {
	return c.call(ctx, http.MethodDelete, "/v1/keys/"+url.PathEscape(keyID), nil, nil)
}

// PutPool creates or replaces a warm pool (admin only).
func (c *Client) PutPool(ctx context.Context, name string, spec api.Spec, size int) (*api.Pool, error) {
	var out api.Pool
	return &out, c.call(ctx, http.MethodPut, "/v1/pools/"+url.PathEscape(name), api.Pool{Spec: spec, Size: size}, &out)
}

// Pools lists the warm pools (admin only).
func (c *Client) Pools(ctx context.Context) ([]api.Pool, error) {
	var out struct {
		Pools []api.Pool `json:"pools"`
	}
	return out.Pools, c.call(ctx, http.MethodGet, "/v1/pools", nil, &out)
}

// DeletePool removes a pool and its ready sandboxes (admin only).
func (c *Client) DeletePool(ctx context.Context, name string) error {
	return c.call(ctx, http.MethodDelete, "/v1/pools/"+url.PathEscape(name), nil, nil)
}

// ExposePort exposes a port of the sandbox's own loopback at a URL of the
// daemon (Port.URL, relative to the daemon's address), whose token is the
// only credential it needs.
func (c *Client) ExposePort(ctx context.Context, id string, port int) (*api.Port, error) {
	var out api.Port
	return &out, c.call(ctx, http.MethodPost, sbPath(id, "/ports"), api.PortRequest{Port: port}, &out)
}

// Ports lists a sandbox's exposed ports.
func (c *Client) Ports(ctx context.Context, id string) ([]api.Port, error) {
	var out api.PortList
	return out.Ports, c.call(ctx, http.MethodGet, sbPath(id, "/ports"), nil, &out)
}

// RevokePort ends an exposed port's URL.
func (c *Client) RevokePort(ctx context.Context, id string, port int) error {
	return c.call(ctx, http.MethodDelete, sbPath(id, "/ports/"+strconv.Itoa(port)), nil, nil)
}

// Base is the daemon's base URL, which an exposed port's URL is relative
// to ("http://cordon" on the unix socket).
func (c *Client) Base() string { return c.base }
