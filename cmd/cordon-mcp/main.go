// Command cordon-mcp serves cordon's sandboxes as MCP tools (package
// mcpserver), over stdio or streamable HTTP. `cordon mcp` runs it; it is a
// program of its own so that the MCP SDK's start-up is paid by it alone,
// not by every cordon command.
package main

import (
	"cmp"
	"context"
	"crypto/subtle"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cordon-sandbox/cordon/egress"
	"github.com/cordon-sandbox/cordon/internal/mounted"
	"github.com/cordon-sandbox/cordon/internal/procid"
	"github.com/cordon-sandbox/cordon/mcpserver"
	"github.com/cordon-sandbox/cordon/server/client"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	fs := flag.NewFlagSet("cordon mcp", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `usage: cordon mcp [flags]

Serves cordon's sandboxes as MCP tools (create_sandbox, run_command,
run_code, read_file, write_file, list_files, start_process,
read_process_output, write_process_input, stop_process, expose_port,
list_sandboxes, destroy_sandbox) and a sandbox's files as resources
(cordon://sandboxes/ID/files/PATH), on stdio, or with --listen on
streamable HTTP at /mcp. Over HTTP every request must carry the token
read from --token-file (Authorization: Bearer TOKEN): whoever reaches the
port would otherwise act with cordon mcp's own daemon key.

The tools act on a daemon: --host, else $CORDON_HOST (with
$CORDON_API_KEY). Without either, cordon mcp starts a private daemon of
its own, on the local tiers, whose sandboxes all end when it does.

The model is not the operator: the hosts it may let sandboxes reach, and
the images it may run, are the ones --allow and --image name (none by
default; any with --allow-any-host, --any-image).

flags:
`)
		fs.PrintDefaults()
	}
	host := fs.String("host", os.Getenv("CORDON_HOST"), "the daemon: unix:///path, tcp://host:port or https://host:port (default $CORDON_HOST; none: a private daemon)")
	listen := fs.String("listen", "", "serve streamable HTTP on `HOST:PORT` (path /mcp) instead of stdio")
	tokenFile := fs.String("token-file", "", "with --listen: the `FILE` holding the bearer token HTTP clients must send (at least 32 characters)")
	tier := fs.String("tier", "", "the tier of sandboxes whose create names none (default: the daemon's)")
	var reach egress.Rules
	fs.Var(&reach, "allow", "a host the model may let sandboxes reach (create_sandbox's allow, run_code's net): `HOST[:PORT,...]`, *.suffix, IP or CIDR; repeatable (none: the model may let them reach none)")
	anyHost := fs.Bool("allow-any-host", false, "let the model let sandboxes reach any host")
	var images stringsFlag
	fs.Var(&images, "image", "an image the model may run (create_sandbox's image), as it names it: `REF`; repeatable (none: the daemon's default image only)")
	anyImage := fs.Bool("any-image", false, "let the model run any image, fetched from any registry it names")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *anyHost && len(reach) > 0 {
		fmt.Fprintln(os.Stderr, "cordon mcp: --allow-any-host goes alone, without --allow")
		return 2
	}
	if *anyImage && len(images) > 0 {
		fmt.Fprintln(os.Stderr, "cordon mcp: --any-image goes alone, without --image")
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	var d *client.Client
	if *host != "" {
		var err error
		if d, err = client.New(*host, os.Getenv("CORDON_API_KEY")); err != nil {
			fmt.Fprintf(os.Stderr, "cordon mcp: %v\n", err)
			return 2
		}
	} else {
		pd, err := startPrivateDaemon(ctx)
		if err != nil {
			fmt.Fprintf(os.Stderr, "cordon mcp: the private daemon: %v\n", err)
			return 1
		}
		defer pd.stop()
		d = pd.client
	}
	srv := mcpserver.New(mcpserver.Config{Daemon: d, Tier: *tier, Version: "cordon", Reach: reach, AnyHost: *anyHost, Images: images, AnyImage: *anyImage})
	if *listen == "" {
		if err := srv.Run(ctx, &mcp.StdioTransport{}); err != nil && ctx.Err() == nil && !errors.Is(err, mcp.ErrConnectionClosed) {
			log.Error("mcp", "err", err)
			return 1
		}
		return 0
	}
	token, err := readToken(*tokenFile)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cordon mcp: --listen needs --token-file: %v\n", err)
		return 2
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cordon mcp: %v\n", err)
		return 1
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", requireToken(token, mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Printf("cordon mcp listening on http://%s/mcp\n", ln.Addr())
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintf(os.Stderr, "cordon mcp: %v\n", err)
		return 1
	}
	return 0
}

// readToken reads the HTTP clients' bearer token.
func readToken(file string) (string, error) {
	if file == "" {
		return "", errors.New("no token file")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	t := strings.TrimSpace(string(b))
	if len(t) < 32 {
		return "", fmt.Errorf("the token in %s is shorter than 32 characters", file)
	}
	return t, nil
}

// requireToken admits requests bearing token, compared in constant time.
func requireToken(token string, h http.Handler) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="cordon mcp"`)
			http.Error(w, "a valid token is needed (Authorization: Bearer TOKEN)", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// privateDaemon is a `cordon serve --ephemeral` of this process's own: its
// state in a directory of its own, its sandboxes destroyed when it stops
// (and it stops when this process ends, however: the kernel sends it
// TERM). Exposed ports get a loopback address, proxied to its socket.
type privateDaemon struct {
	cmd    *exec.Cmd
	dir    string
	lock   *os.File // held while the directory is this process's (privateDir)
	client *client.Client
	ports  *http.Server
}

func startPrivateDaemon(ctx context.Context) (*privateDaemon, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cordon := cmp.Or(os.Getenv("CORDON_BIN"), filepath.Join(filepath.Dir(self), "cordon"))
	dir, lock, err := privateDir()
	if err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, "cordon.sock")
	cmd := exec.Command(cordon, "serve", "--ephemeral", "--prestart", "1", "--listen", "unix://"+sock, "--state-dir", filepath.Join(dir, "state"))
	cmd.Env = append(os.Environ(), "CORDON_STATE_DIR="+filepath.Join(dir, "sandboxes"))
	cmd.Stderr = os.Stderr // the daemon's log is the server's log
	if err := startTied(cmd); err != nil {
		mounted.Remove(dir)
		lock.Close()
		return nil, err
	}
	record := fmt.Sprintf("%d %s\n", cmd.Process.Pid, procid.StartTime(cmd.Process.Pid))
	_ = os.WriteFile(filepath.Join(dir, daemonRecord), []byte(record), 0o600)
	pd := &privateDaemon{cmd: cmd, dir: dir, lock: lock}
	pd.client, _ = client.New("unix://"+sock, "")
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := pd.client.List(ctx, client.ListOptions{}); err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			pd.stop()
			return nil, errors.New("it did not answer within 30 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Exposed ports' URLs are the daemon's; this one listens on a socket,
	// so a loopback listener carries /v1/ports/ to it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		pd.stop()
		return nil, err
	}
	base := &url.URL{Scheme: "http", Host: "cordon"}
	rp := httputil.NewSingleHostReverseProxy(base)
	rp.Transport = pd.client.Transport()
	pd.ports = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/v1/ports/") {
			http.NotFound(w, r)
			return
		}
		rp.ServeHTTP(w, r)
	})}
	go pd.ports.Serve(ln)
	pd.client = client.NewTransport("http://"+ln.Addr().String(), "", pd.client.Transport())
	return pd, nil
}

func (pd *privateDaemon) stop() {
	if pd.ports != nil {
		pd.ports.Close()
	}
	_ = pd.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { pd.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		_ = pd.cmd.Process.Kill()
		<-done
	}
	// (A runtime's state may hold mounts: runsc binds a network namespace
	// into its root.)
	if err := mounted.Remove(pd.dir); err != nil {
		slog.Error("removing the private daemon's directory", "dir", pd.dir, "err", err)
	}
	pd.lock.Close()
}

// A private daemon's directory (os.TempDir()/cordon-mcp-*) is in use while
// the cordon mcp that holds its lock runs, or its daemon (recorded in it as
// "PID START") does.
const (
	lockName     = "lock"
	daemonRecord = "daemon"
)

// privateDir is a directory for this process's private daemon, locked:
// one an earlier cordon mcp left behind (killed, with its daemon, so that
// neither could remove it), taken over so that the new daemon's start
// tears down what the old one's sandboxes left (their cgroups, runtime
// state and mounts: a restarted daemon's sweep), else a new one.
func privateDir() (string, *os.File, error) {
	old, _ := filepath.Glob(filepath.Join(os.TempDir(), "cordon-mcp-*"))
	for _, dir := range old {
		// Only this user's own (a shared temporary directory holds
		// anybody's, named as they like).
		if !ownDir(dir) {
			continue
		}
		lock, err := lockIn(dir, lockName)
		if err != nil {
			continue
		}
		if rec, err := os.ReadFile(filepath.Join(dir, daemonRecord)); err == nil && procid.Named(string(rec)) {
			lock.Close()
			continue
		}
		return dir, lock, nil
	}
	dir, err := os.MkdirTemp("", "cordon-mcp-")
	if err != nil {
		return "", nil, err
	}
	lock, err := newLock(dir)
	if err == nil {
		// Sandboxes run as unprivileged users that must pass through it.
		if err = os.Chmod(dir, 0o711); err != nil {
			lock.Close()
		}
	}
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	return dir, lock, nil
}

// newLock makes dir's lock file, locked before it takes its name, so that
// no other process takes a new directory for a left one.
func newLock(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockName+".new"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	if err := flock(f); err != nil {
		f.Close()
		return nil, err
	}
	if err := os.Rename(f.Name(), filepath.Join(dir, lockName)); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// ownDir reports whether dir is a directory (not a link to one) of this
// process's user.
func ownDir(dir string) bool {
	st, err := os.Lstat(dir)
	if err != nil || !st.IsDir() {
		return false
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	return ok && int(sys.Uid) == os.Geteuid()
}

// lockIn opens and locks the lock file name in dir, if no process holds it.
func lockIn(dir, name string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	if err := flock(f); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// stringsFlag is a repeatable string flag.
type stringsFlag []string

func (f *stringsFlag) String() string { return "" }
func (f *stringsFlag) Set(v string) error {
	if v == "" {
		return errors.New("empty")
	}
	*f = append(*f, v)
	return nil
}
