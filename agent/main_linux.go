package agent

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cordon-sandbox/cordon/agent/internal/httpd"
	"github.com/cordon-sandbox/cordon/agent/startup"
	"golang.org/x/sys/unix"
)

// MaxConnections bounds the connections the agent serves at once.
const MaxConnections = 1024

// Main runs cordon-agent with the process's environment and returns its exit
// status: 1 for a refused configuration or a retired agent, 0 for a clean
// stop (SIGTERM, idle timeout). opts are as for Run.
func Main(stdout, stderr io.Writer, opts Options) int {
	env, lifeline, err := tokenFromFD(os.Environ())
	if lifeline != nil {
		opts.Lifeline = lifeline
	}
	if err != nil {
		fmt.Fprintf(stderr, "cordon-agent: refusing to start: %v\n", err)
		return 1
	}
	// Whatever descriptors the agent inherited stay out of every command.
	if err := cloexecInherited(); err != nil {
		fmt.Fprintf(stderr, "cordon-agent: refusing to start: close inherited descriptors: %v\n", err)
		return 1
	}
	if opts.Ready == nil {
		if opts.Ready, err = readyFromFD(env); err != nil {
			fmt.Fprintf(stderr, "cordon-agent: refusing to start: %v\n", err)
			return 1
		}
	}
	if opts.Listener == nil {
		if opts.Listener, err = listenerFromFD(env); err != nil {
			fmt.Fprintf(stderr, "cordon-agent: refusing to start: %v\n", err)
			return 1
		}
	}
	_, inEnv := os.LookupEnv(EnvPrefix + "TOKEN")
	return Run(env, inEnv, stdout, stderr, opts)
}

// readyFromFD is ReadyTo the descriptor CORDON_AGENT_READY_FD names (the
// process tier's init passes its readiness pipe on when it executes the
// agent rather than becoming it), nil when none is named.
func readyFromFD(env []string) (func([]byte), error) {
	fd, err := fdFromEnv(env, "READY_FD")
	if fd < 0 || err != nil {
		return nil, err
	}
	return startup.ReadyTo(fd), nil
}

// listenerFromFD is the listening socket CORDON_AGENT_LISTEN_FD names (the
// process tier's init passes on the one the host made when it executes the
// agent rather than becoming it), nil when none is named.
func listenerFromFD(env []string) (net.Listener, error) {
	fd, err := fdFromEnv(env, "LISTEN_FD")
	if fd < 0 || err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "listener")
	defer f.Close() // FileListener holds a descriptor of its own
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("%sLISTEN_FD=%d: %w", EnvPrefix, fd, err)
	}
	return ln, nil
}

// fdFromEnv reads the descriptor CORDON_AGENT_<name> names: -1 when none
// is, an error when it is not an open descriptor above 2. The descriptor
// is already close-on-exec, as every inherited one is.
func fdFromEnv(env []string, name string) (int, error) {
	var fdText string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, EnvPrefix+name+"="); ok {
			fdText = v
		}
	}
	if fdText == "" {
		return -1, nil
	}
	fd, err := strconv.Atoi(fdText)
	if err != nil || fd < 3 {
		return -1, fmt.Errorf("%s%s=%q is not a descriptor above 2", EnvPrefix, name, fdText)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
		return -1, fmt.Errorf("%s%s=%d: %w", EnvPrefix, name, fd, err)
	}
	return fd, nil
}

// cloexecInherited marks every descriptor above 2 close-on-exec: with
// close_range where the kernel has it, else one by one (user-space kernels
// such as gVisor's may lack CLOSE_RANGE_CLOEXEC).
func cloexecInherited() error {
	err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	if err == nil || !(errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS)) {
		return err
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < 3 {
			continue
		}
		// The directory's own descriptor is gone by now: EBADF is fine.
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil && !errors.Is(err, unix.EBADF) {
			return err
		}
	}
	return nil
}

// Options are what an embedding (the process tier's init) adds to Run.
type Options = startup.Options

// Run validates the configuration in env (os.Environ's shape), protects
// the token, and serves until stopped; it returns the exit status. scrub
// says the token is in this process's initial environment block and must
// be overwritten there.
func Run(env []string, scrub bool, stdout, stderr io.Writer, opts Options) int {
	wait, code := Start(env, scrub, stdout, stderr, opts)
	if wait == nil {
		return code
	}
	return wait()
}

// Start is Run up to the agent's serving: it returns once the agent is
// ready (Options.Ready has been called) and serves on other goroutines,
// with a wait that returns Run's exit status; or, when the agent could not
// start, a nil wait and the status. (The process tier's init starts the
// agent on the thread that then serves its commands: it needs no other
// thread until the agent is ready.)
func Start(env []string, scrub bool, stdout, stderr io.Writer, opts Options) (wait func() int, code int) {
	// The log may go to a pipe whose reader goes away (a daemon that
	// restarts while its sandboxes live on). A write to a broken standard
	// output or error kills a Go program that does not catch SIGPIPE; on
	// any other descriptor it fails with EPIPE, and the agent serves on.
	// So it writes through duplicates of them. (Catching SIGPIPE did the
	// same, but os/signal's set-up for it cost some 0.2 ms of every start;
	// ignoring it would pass SIG_IGN on to every command.)
	stdout, stderr = private(stdout), private(stderr)
	log := slog.New(slog.NewTextHandler(stderr, nil))
	cfg, err := FromEnv(env)
	if err != nil {
		fmt.Fprintf(stderr, "cordon-agent: refusing to start: %v\n", err)
		return nil, 1
	}
	if err := hardenSelf(scrub, []string{EnvPrefix + "TOKEN"}); err != nil {
		fmt.Fprintf(stderr, "cordon-agent: refusing to start: cannot protect the agent token: %v\n", err)
		return nil, 1
	}
	os.Unsetenv(EnvPrefix + "TOKEN")

	// The spare threads are made while the agent starts serving; no
	// command starts until they exist (reaper.reserved).
	reserved := make(chan struct{})
	go func() {
		reserveThreads(cfg.SpareThreads)
		close(reserved)
	}()
	ln := opts.Listener
	if ln == nil {
		if ln, err = listen(cfg); err != nil {
			fmt.Fprintf(stderr, "cordon-agent: could not listen: %v\n", err)
			return nil, 1
		}
	}
	var bridge net.Listener
	if cfg.EgressSocket != "" {
		if bridge, err = net.Listen("tcp", cfg.EgressListen); err != nil {
			fmt.Fprintf(stderr, "cordon-agent: egress bridge: %v\n", err)
			return nil, 1
		}
		// Commands inherit the proxy settings; per-call env still wins.
		env = withProxyEnv(env, cfg.EgressListen)
	}
	s, err := New(cfg, env, log, true)
	if err != nil {
		fmt.Fprintf(stderr, "cordon-agent: %v\n", err)
		return nil, 1
	}
	s.reaper.onThread = opts.CommandThread
	s.reaper.oom, s.reaper.own = oomScore(opts.OOMScore)
	s.commandThread = opts.CommandThreadID
	s.reaper.reserved = reserved
	if bridge != nil {
		go s.serveEgressBridge(bridge, cfg.EgressSocket, cfg.EgressPass)
	}
	exit := make(chan int, 1)
	s.exit = func(code int) {
		select {
		case exit <- code:
		default:
		}
	}
	srv := &httpd.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    64 << 10,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	s.onRetire = func() { ln.Close() }
	if opts.Ready != nil {
		opts.Ready(s.readyRecord())
	}
	addr := ln.Addr().String()
	if cfg.Socket != "" {
		addr = cfg.Socket // (a listener made elsewhere may have been renamed there)
	}
	fmt.Fprintf(stdout, "cordon-agent listening on %s workspace=%s auth=%v\n", addr, cfg.Workspace, cfg.Token != "")
	s.ArmIdle()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	// Serving starts last: the caller of Start may hold what a request
	// waits for (the process tier's init serves the command thread once
	// Start returns), so nothing here may wait on a request. Connections
	// made since Ready wait in the listener's queue.
	go func() {
		if err := srv.Serve(limitListener(ln, MaxConnections, cfg.LocalGuests)); err != nil && !errors.Is(err, net.ErrClosed) {
			log.Error("serve", "err", err)
			s.exit(1)
		}
	}()
	var hostGone <-chan struct{}
	if opts.Lifeline != nil {
		hostGone = watchLifeline(opts.Lifeline)
	}
	return func() int {
		select {
		case <-sig:
		case <-hostGone:
			log.Warn("the host is gone (its lifeline closed): stopping")
		case code := <-exit:
			return code
		}
		ln.Close()
		s.Shutdown()
		return 0
	}, 0
}

// private returns a duplicate of w when w is this process's standard
// output or error (see Run), else w.
func private(w io.Writer) io.Writer {
	f, ok := w.(*os.File)
	if !ok || f.Fd() != 1 && f.Fd() != 2 {
		return w
	}
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return w
	}
	return os.NewFile(uintptr(fd), f.Name())
}

func listen(cfg Config) (net.Listener, error) {
	if cfg.Socket == "" {
		return net.Listen("tcp", net.JoinHostPort(cfg.Bind, strconv.Itoa(cfg.Port)))
	}
	return startup.ListenUnix(cfg.Socket)
}

// MaxGuestConnections bounds the connections to the agent that come from
// inside its own sandbox (the workload, where it shares the agent's user
// and may reach the socket: a sandbox started without root): the rest of
// MaxConnections is the host's.
const MaxGuestConnections = 16

// limitListener admits at most n connections at once, of which at most
// MaxGuestConnections from inside the sandbox; further ones from the host
// wait in the kernel's accept queue, further ones from inside are closed.
func limitListener(ln net.Listener, n int, localGuests bool) net.Listener {
	return &limited{Listener: ln, sem: make(chan struct{}, n), guests: make(chan struct{}, MaxGuestConnections), localGuests: localGuests}
}

type limited struct {
	net.Listener
	sem, guests chan struct{}
	// localGuests: a TCP peer of this network namespace is a guest
	// (Config.LocalGuests).
	localGuests bool
}

func (l *limited) Accept() (net.Conn, error) {
	for {
		l.sem <- struct{}{}
		c, err := l.Listener.Accept()
		if err != nil {
			<-l.sem
			return nil, err
		}
		if !fromInside(c, l.localGuests) {
			return &limitedConn{Conn: c, release: func() { <-l.sem }}, nil
		}
		select {
		case l.guests <- struct{}{}:
			return &limitedConn{Conn: c, release: func() { <-l.guests; <-l.sem }}, nil
		default:
			c.Close()
			<-l.sem
		}
	}
}

// fromInside reports whether a connection's peer is inside the sandbox:
// for a unix socket, a process of this process's PID namespace (the
// kernel gives a peer outside it, the host, as pid 0); for TCP (a pod's
// agent, which shares its network namespace with the workload), a peer
// whose address is loopback or one of this namespace's own, where
// localTCP says the namespace is shared with the workload.
func fromInside(c net.Conn, localTCP bool) bool {
	if tc, ok := c.(*net.TCPConn); ok {
		return localTCP && localPeer(tc)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return false
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return false
	}
	var cred *unix.Ucred
	_ = raw.Control(func(fd uintptr) { cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
	return err == nil && cred != nil && cred.Pid != 0
}

// localPeer reports whether c's peer is this network namespace: a
// connection from one of its own addresses to another has the same
// address at both ends unless one is loopback, or the peer holds an
// address of another of its interfaces.
func localPeer(c *net.TCPConn) bool {
	r, ok1 := c.RemoteAddr().(*net.TCPAddr)
	l, ok2 := c.LocalAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return true
	}
	if r.IP.IsLoopback() || r.IP.Equal(l.IP) {
		return true
	}
	addrs, err := localAddrs()
	if err != nil {
		return true // in doubt, a guest's share
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(r.IP) {
			return true
		}
	}
	return false
}

// localAddrs are the network namespace's addresses, read once: a pod's do
// not change while it lives, and a connection's accept should not wait on
// a netlink dump.
var localAddrs = sync.OnceValues(net.InterfaceAddrs)

type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

// NetConn is the connection accepted, for what needs its kind (a unix
// socket that can carry a descriptor).
func (c *limitedConn) NetConn() net.Conn { return c.Conn }

// CloseWrite half-closes the connection, where its kind allows that.
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// tokenFromFD reads the token from the descriptor CORDON_AGENT_TOKEN_FD
// names, when it does, and closes it: a token handed over that way never
// appears in any environment block. It returns env with the token added.
// With CORDON_AGENT_LIFELINE=1 the token ends at a newline and the
// descriptor is kept, and returned, as the agent's lifeline
// (Options.Lifeline).
func tokenFromFD(env []string) ([]string, *os.File, error) {
	var fdText string
	lifeline := false
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, EnvPrefix+"TOKEN_FD="); ok {
			fdText = v
		}
		if strings.HasPrefix(kv, EnvPrefix+"TOKEN=") && fdText != "" {
			return nil, nil, fmt.Errorf("set CORDON_AGENT_TOKEN or CORDON_AGENT_TOKEN_FD, not both")
		}
		lifeline = lifeline || kv == EnvPrefix+"LIFELINE=1"
	}
	if fdText == "" {
		return env, nil, nil
	}
	fd, err := strconv.Atoi(fdText)
	if err != nil || fd == 1 || fd == 2 || fd < 0 {
		return nil, nil, fmt.Errorf("CORDON_AGENT_TOKEN_FD=%q is not standard input or a descriptor above 2", fdText)
	}
	f := os.NewFile(uintptr(fd), "token")
	var b []byte
	if lifeline {
		b, err = readLine(f, 4096)
	} else {
		b, err = io.ReadAll(io.LimitReader(f, 4096))
	}
	var kept *os.File
	if lifeline && err == nil {
		// The lifeline goes on at a descriptor of its own (close-on-exec),
		// standard input becoming /dev/null below.
		if dup, derr := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3); derr == nil {
			kept = os.NewFile(uintptr(dup), "lifeline")
		} else {
			err = derr
		}
	}
	if fd == 0 {
		// Standard input (a runtime that passes no other descriptor)
		// becomes /dev/null once the token is read.
		if null, nerr := os.Open(os.DevNull); nerr == nil {
			_ = unix.Dup3(int(null.Fd()), 0, 0)
			null.Close()
		}
	} else {
		f.Close()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading the token from CORDON_AGENT_TOKEN_FD: %w", err)
	}
	return append(env, EnvPrefix+"TOKEN="+string(b)), kept, nil
}

// readLine reads up to a newline (not kept), at most max bytes, a byte at a
// time: what follows stays in the descriptor.
func readLine(f *os.File, max int) ([]byte, error) {
	var b []byte
	one := make([]byte, 1)
	for len(b) <= max {
		n, err := f.Read(one)
		if n == 1 {
			if one[0] == '\n' {
				return b, nil
			}
			b = append(b, one[0])
		}
		if err != nil {
			return nil, fmt.Errorf("no newline after the token: %w", err)
		}
	}
	return nil, fmt.Errorf("a token over %d bytes", max)
}

// watchLifeline closes gone once f reads end of file (or fails): the host
// that holds its other end is gone.
func watchLifeline(f *os.File) <-chan struct{} {
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		buf := make([]byte, 64)
		for {
			if _, err := f.Read(buf); err != nil {
				return
			}
		}
	}()
	return gone
}
