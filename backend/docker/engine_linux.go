package docker

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// engine speaks the Docker Engine API, the documented HTTP API every
// docker CLI and SDK uses, for the dozen calls this tier makes; request
// and answer bodies are the API's own Go types. The official Go client is
// not used: linking it (its image-reference parser compiles a dozen
// regular expressions at start, and it brings OpenTelemetry) made every
// `cordon run` 2–3 ms slower, docker tier or not.
type engine struct {
	host string // unix:///path
	hc   *http.Client
}

// errNotFound is the engine's 404: no such container or image.
var errNotFound = errors.New("not found")

// engineError is an answer the engine refused, with its message.
type engineError struct {
	Status  int
	Message string
}

func (e *engineError) Error() string { return fmt.Sprintf("%d %s", e.Status, e.Message) }

// Is makes a 404 errNotFound.
func (e *engineError) Is(target error) bool {
	return target == errNotFound && e.Status == http.StatusNotFound
}

// invalid reports whether err is the engine refusing a request as invalid
// (a caller's mistake: a bad image name, a limit it cannot set).
func invalid(err error) bool {
	var e *engineError
	return errors.As(err, &e) && e.Status == http.StatusBadRequest
}

// newEngine reaches the engine at host ("" means what the docker CLI
// would reach: DOCKER_HOST, then the current context's engine, then the
// default socket). Only a local engine (a unix socket) will do: a
// sandbox's sockets are directories of this host bound in.
func newEngine(host string) (*engine, error) {
	if host == "" {
		host = os.Getenv("DOCKER_HOST")
	}
	if host == "" {
		var err error
		if host, err = contextHost(); err != nil {
			return nil, err
		}
	}
	if host == "" {
		host = "unix:///var/run/docker.sock"
	}
	path, ok := strings.CutPrefix(host, "unix://")
	if !ok || path == "" {
		return nil, fmt.Errorf("the engine at %s is not on this host: the docker tier needs a local engine (a unix socket)", host)
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		},
		MaxIdleConnsPerHost: 16,
	}
	return &engine{host: host, hc: &http.Client{Transport: tr}}, nil
}

// contextHost is the engine of the docker CLI's current context
// (DOCKER_CONTEXT, else the configuration's currentContext), "" for the
// default context. Contexts live under DOCKER_CONFIG (default ~/.docker),
// each in contexts/meta/SHA256(NAME)/meta.json.
func contextHost() (string, error) {
	dir := os.Getenv("DOCKER_CONFIG")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", nil
		}
		dir = filepath.Join(home, ".docker")
	}
	name := os.Getenv("DOCKER_CONTEXT")
	if name == "" {
		var cfg struct{ CurrentContext string }
		if b, err := os.ReadFile(filepath.Join(dir, "config.json")); err == nil {
			_ = json.Unmarshal(b, &cfg)
		}
		name = cfg.CurrentContext
	}
	if name == "" || name == "default" {
		return "", nil
	}
	sum := sha256.Sum256([]byte(name))
	b, err := os.ReadFile(filepath.Join(dir, "contexts", "meta", hex.EncodeToString(sum[:]), "meta.json"))
	if err != nil {
		return "", fmt.Errorf("docker context %q: %v", name, err)
	}
	var meta struct {
		Endpoints map[string]struct{ Host string }
	}
	if err := json.Unmarshal(b, &meta); err != nil || meta.Endpoints["docker"].Host == "" {
		return "", fmt.Errorf("docker context %q names no engine", name)
	}
	return meta.Endpoints["docker"].Host, nil
}

// do sends a request and returns the answer, or the engine's refusal.
func (e *engine) do(ctx context.Context, method, path string, query url.Values, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	u := "http://docker" + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 400 {
		defer resp.Body.Close()
		var m struct {
			Message string `json:"message"`
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if json.Unmarshal(b, &m) != nil || m.Message == "" {
			m.Message = strings.TrimSpace(string(b))
		}
		return nil, &engineError{Status: resp.StatusCode, Message: m.Message}
	}
	return resp, nil
}

// call sends a request and decodes its answer into out (nil: discard).
func (e *engine) call(ctx context.Context, method, path string, query url.Values, body, out any) error {
	resp, err := e.do(ctx, method, path, query, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

func (e *engine) ping(ctx context.Context) error {
	return e.call(ctx, http.MethodGet, "/_ping", nil, nil, nil)
}

// cgroupDriver is how the engine manages its containers' cgroups:
// "cgroupfs" (itself, where a container's CgroupParent is a cgroup's
// path) or "systemd" (as units, where it is a slice's name).
func (e *engine) cgroupDriver(ctx context.Context) (string, error) {
	var info struct{ CgroupDriver string }
	err := e.call(ctx, http.MethodGet, "/info", nil, nil, &info)
	return info.CgroupDriver, err
}

// imageID is the id of the image ref names in the engine's store.
func (e *engine) imageID(ctx context.Context, ref string) (string, error) {
	var info struct {
		ID string `json:"Id"`
	}
	err := e.call(ctx, http.MethodGet, "/images/"+ref+"/json", nil, nil, &info)
	return info.ID, err
}

// pull pulls ref into the engine's store (docker pull); the answer is a
// stream of progress whose last message says how it ended.
func (e *engine) pull(ctx context.Context, ref string) error {
	name, tag := ref, ""
	if i := strings.LastIndexAny(ref, ":/@"); i >= 0 && ref[i] == ':' {
		name, tag = ref[:i], ref[i+1:]
	}
	q := url.Values{"fromImage": {name}}
	if tag != "" {
		q.Set("tag", tag)
	}
	resp, err := e.do(ctx, http.MethodPost, "/images/create", q, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var m struct {
			Error string `json:"error"`
		}
		if err := dec.Decode(&m); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		if m.Error != "" {
			return &engineError{Status: http.StatusNotFound, Message: m.Error}
		}
	}
}

// create makes a container named name ("" lets the engine name it).
func (e *engine) create(ctx context.Context, name string, body *createRequest) (string, error) {
	var out struct {
		ID string `json:"Id"`
	}
	var q url.Values
	if name != "" {
		q = url.Values{"name": {name}}
	}
	err := e.call(ctx, http.MethodPost, "/containers/create", q, body, &out)
	return out.ID, err
}

// attachStdin attaches to a container's standard input: the connection,
// taken over, carries what is written to it.
func (e *engine) attachStdin(ctx context.Context, id string) (net.Conn, error) {
	path := strings.TrimPrefix(e.host, "unix://")
	conn, err := (&net.Dialer{}).DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	req, _ := http.NewRequest(http.MethodPost, "http://docker/containers/"+id+"/attach?stream=1&stdin=1", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "tcp")
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if err := req.Write(conn); err != nil {
		conn.Close()
		return nil, err
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		conn.Close()
		return nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols && resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		conn.Close()
		return nil, &engineError{Status: resp.StatusCode, Message: strings.TrimSpace(string(b))}
	}
	_ = conn.SetDeadline(time.Time{})
	return conn, nil
}

func (e *engine) start(ctx context.Context, id string) error {
	return e.call(ctx, http.MethodPost, "/containers/"+id+"/start", nil, nil, nil)
}

// waitFrom blocks until the container meets condition ("next-exit",
// "not-running") and returns its exit status. The engine answers the
// request's head once the wait is in place: waiting is closed then (or
// on failure).
func (e *engine) waitFrom(ctx context.Context, id, condition string, waiting chan<- struct{}) (int64, error) {
	resp, err := e.do(ctx, http.MethodPost, "/containers/"+id+"/wait", url.Values{"condition": {condition}}, nil)
	close(waiting)
	if err != nil {
		return -1, err
	}
	defer resp.Body.Close()
	var out struct {
		StatusCode int64
		Error      *struct{ Message string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return -1, err
	}
	if out.Error != nil && out.Error.Message != "" {
		return -1, errors.New(out.Error.Message)
	}
	return out.StatusCode, nil
}

// pause freezes every process of a container (the engine's cgroup
// freezer), or thaws them (pause false).
func (e *engine) pause(ctx context.Context, id string, pause bool) error {
	verb := "/unpause"
	if pause {
		verb = "/pause"
	}
	return e.call(ctx, http.MethodPost, "/containers/"+id+verb, nil, nil, nil)
}

func (e *engine) kill(ctx context.Context, id, signal string) error {
	return e.call(ctx, http.MethodPost, "/containers/"+id+"/kill", url.Values{"signal": {signal}}, nil, nil)
}

// inspected is what cordon reads of a container's inspection.
type inspected struct {
	Config *struct{ Labels map[string]string }
	State  *struct {
		Running bool
		Pid     int
	}
}

func (c *inspected) labels() map[string]string {
	if c.Config == nil {
		return nil
	}
	return c.Config.Labels
}

func (c *inspected) running() bool { return c.State != nil && c.State.Running }

// inspect inspects a container.
func (e *engine) inspect(ctx context.Context, id string) (*inspected, error) {
	var out inspected
	if err := e.call(ctx, http.MethodGet, "/containers/"+id+"/json", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// remove removes a container, killing what runs in it, with its
// anonymous volumes.
func (e *engine) remove(ctx context.Context, id string) error {
	return e.call(ctx, http.MethodDelete, "/containers/"+id, url.Values{"force": {"1"}, "v": {"1"}}, nil, nil)
}

// listed is a container as the engine lists it.
type listed struct {
	ID     string `json:"Id"`
	Labels map[string]string
}

// list lists every container (running or not) with all the labels given.
func (e *engine) list(ctx context.Context, labels ...string) ([]listed, error) {
	f, _ := json.Marshal(map[string][]string{"label": labels})
	var out []listed
	err := e.call(ctx, http.MethodGet, "/containers/json", url.Values{"all": {"1"}, "filters": {string(f)}}, nil, &out)
	return out, err
}

// logs is the tail of a container's standard output and error.
func (e *engine) logs(ctx context.Context, id string, tail int) (string, error) {
	resp, err := e.do(ctx, http.MethodGet, "/containers/"+id+"/logs", url.Values{"stdout": {"1"}, "stderr": {"1"}, "tail": {fmt.Sprint(tail)}}, nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	// Without a terminal the engine frames each write: a stream byte,
	// three zeros, a big-endian length.
	var out strings.Builder
	r := bufio.NewReader(io.LimitReader(resp.Body, 1<<20))
	for {
		var head [8]byte
		if _, err := io.ReadFull(r, head[:]); err != nil {
			break
		}
		if _, err := io.CopyN(&out, r, int64(binary.BigEndian.Uint32(head[4:]))); err != nil {
			break
		}
	}
	return out.String(), nil
}

// readFile reads one regular file of a container (made or running) from
// the engine's archive of it, at most limit bytes; a missing path, or one
// that is not a regular file (a link, say), is errNotFound.
func (e *engine) readFile(ctx context.Context, id, path string, limit int64) ([]byte, error) {
	resp, err := e.do(ctx, http.MethodGet, "/containers/"+id+"/archive", url.Values{"path": {path}}, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	tr := tar.NewReader(resp.Body)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil, errNotFound
		} else if err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			return io.ReadAll(io.LimitReader(tr, limit))
		}
	}
}

// load loads a `docker save` tarball into the engine's store (docker
// load) and returns what the engine said it loaded.
func (e *engine) load(ctx context.Context, tarball io.Reader) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://docker/images/load?quiet=1", tarball)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-tar")
	resp, err := e.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return nil, &engineError{Status: resp.StatusCode, Message: strings.TrimSpace(string(b))}
	}
	var loaded []string
	dec := json.NewDecoder(resp.Body)
	for {
		var m struct {
			Stream string `json:"stream"`
			Error  string `json:"error"`
		}
		if err := dec.Decode(&m); err == io.EOF {
			return loaded, nil
		} else if err != nil {
			return loaded, err
		}
		if m.Error != "" {
			return loaded, errors.New(m.Error)
		}
		if s := strings.TrimSpace(m.Stream); s != "" {
			loaded = append(loaded, s)
		}
	}
}

func (e *engine) close() { e.hc.CloseIdleConnections() }
