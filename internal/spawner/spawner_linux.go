// Package spawner starts processes through a helper (cordon-agent's
// spawner, sandboxinit.SpawnerArg) for a host that starts many sandboxes:
// a fork that makes a user namespace copies its parent's page tables, so
// its cost grows with the parent's memory, and a daemon's grows with the
// sandboxes it serves. The helper stays a few megabytes.
package spawner

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cordon-sandbox/cordon/agent/sandboxinit"
	"github.com/cordon-sandbox/cordon/internal/logbuf"
	"github.com/cordon-sandbox/cordon/internal/pidfd"
	"github.com/cordon-sandbox/cordon/internal/spawnthread"
	"golang.org/x/sys/unix"
)

// ErrGone: the helper has ended (it is started again on the next Shared).
var ErrGone = errors.New("spawner: the helper has ended")

// Spawner is one running helper.
type Spawner struct {
	conn    *net.UnixConn
	cmd     *exec.Cmd
	logs    *logbuf.Buffer
	reqMu   sync.Mutex // one request in flight: answers come in order
	answers chan answer
	mu      sync.Mutex
	kids    map[int]*Process // started and not yet known to have exited
	gone    chan struct{}
}

type answer struct {
	p   *Process
	err error
}

var (
	sharedMu sync.Mutex
	shared   = map[string]*Spawner{}
	warming  = map[string]time.Time{} // agent → when Running last started a helper in the background
)

// Shared returns this process's helper for the agent binary at path,
// starting it if there is none or the last one ended. It lives as long as
// this process: its parent-death signal ends it with us.
func Shared(agent string) (*Spawner, error) {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if s := shared[agent]; s.running() {
		return s, nil
	}
	s, err := start(agent)
	if err != nil {
		return nil, err
	}
	shared[agent] = s
	return s, nil
}

// Running returns this process's helper for agent if one is running.
// Otherwise it starts one in the background and returns nil: the caller
// starts this process itself, and a later call finds the helper. A helper
// that fails to start, or ends, is started again at most once per
// warmRetry.
func Running(agent string) *Spawner {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if s := shared[agent]; s.running() {
		return s
	}
	if t, ok := warming[agent]; ok && time.Since(t) < warmRetry {
		return nil
	}
	warming[agent] = time.Now()
	go func() {
		s, err := start(agent)
		if err != nil {
			return
		}
		sharedMu.Lock()
		defer sharedMu.Unlock()
		if cur := shared[agent]; cur.running() {
			// Shared started one meanwhile.
			_ = s.cmd.Process.Kill()
			return
		}
		shared[agent] = s
	}()
	return nil
}

// warmRetry spaces Running's background starts.
const warmRetry = time.Second

// running: s is a helper that has not ended.
func (s *Spawner) running() bool {
	if s == nil {
		return false
	}
	select {
	case <-s.gone:
		return false
	default:
		return true
	}
}

func start(agent string) (*Spawner, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "spawner"), os.NewFile(uintptr(fds[1]), "spawner")
	defer theirs.Close()
	s := &Spawner{logs: logbuf.New(16 << 10), answers: make(chan answer, 1), kids: map[int]*Process{}, gone: make(chan struct{})}
	c, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		return nil, err
	}
	s.conn = c.(*net.UnixConn)
	s.cmd = exec.Command(agent, sandboxinit.SpawnerArg)
	s.cmd.Args[0] = "cordon-agent"
	s.cmd.Env = []string{}
	s.cmd.Dir = "/"
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	s.cmd.ExtraFiles = []*os.File{theirs}
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setsid: true}
	if spawnthread.Do(func() { err = s.cmd.Start() }); err != nil {
		s.conn.Close()
		return nil, fmt.Errorf("start the spawner: %w", err)
	}
	go s.read()
	go func() { _ = s.cmd.Wait() }()
	return s, nil
}

// Start starts the process cmd describes (Path, Args, Env, Dir,
// SysProcAttr, ExtraFiles) with standard input from /dev/null and its
// output and error to out. Nothing else of cmd is used, and cmd is not
// started: the Process answers for it. The helper refuses a cgroup or pidfd
// descriptor in SysProcAttr (its numbers are this process's).
func (s *Spawner) Start(cmd *exec.Cmd, out *os.File) (*Process, error) {
	null, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	defer null.Close()
	files := append([]*os.File{null, out, out}, cmd.ExtraFiles...)
	if len(files) > sandboxinit.MaxSpawnFiles {
		return nil, fmt.Errorf("spawner: %d descriptors, at most %d", len(files), sandboxinit.MaxSpawnFiles)
	}
	req, err := json.Marshal(sandboxinit.SpawnRequest{Path: cmd.Path, Args: cmd.Args, Env: cmd.Env, Dir: cmd.Dir, Sys: cmd.SysProcAttr})
	if err != nil {
		return nil, err
	}
	if len(req) > sandboxinit.MaxSpawnRequestBytes {
		return nil, fmt.Errorf("spawner: request of %d bytes, at most %d", len(req), sandboxinit.MaxSpawnRequestBytes)
	}
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	s.reqMu.Lock()
	defer s.reqMu.Unlock()
	if _, _, err := s.conn.WriteMsgUnix(req, unix.UnixRights(fds...), nil); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrGone, err)
	}
	select {
	case a := <-s.answers:
		return a.p, a.err
	case <-s.gone:
		return nil, fmt.Errorf("%w: %s", ErrGone, strings.TrimSpace(s.logs.String()))
	case <-time.After(answerTimeout):
		// A helper that does not answer is ended: the next Shared starts
		// another, and what it started dies with it or is watched.
		_ = s.cmd.Process.Kill()
		return nil, fmt.Errorf("%w: no answer in %v", ErrGone, answerTimeout)
	}
}

// answerTimeout bounds how long a start may take in the helper (a clone
// and an exec).
var answerTimeout = 30 * time.Second

// read receives the helper's answers and exits until it ends; then every
// process not known to have exited is watched through its pidfd.
func (s *Spawner) read() {
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(4))
	for {
		n, oobn, _, _, err := s.conn.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			break
		}
		fds, ferr := sandboxinit.ReceivedFDs(oob[:oobn])
		var m sandboxinit.SpawnMessage
		if err := json.Unmarshal(buf[:n], &m); err != nil || ferr != nil {
			closeAll(fds)
			break
		}
		switch {
		case m.Exited > 0:
			closeAll(fds)
			s.mu.Lock()
			p := s.kids[m.Exited]
			delete(s.kids, m.Exited)
			s.mu.Unlock()
			if p != nil {
				p.exit(m.Status)
			}
		case m.Error != "" || len(fds) != 1:
			closeAll(fds)
			msg := m.Error
			if msg == "" {
				msg = "an answer without a pidfd"
			}
			s.answers <- answer{err: errors.New("spawner: " + msg)}
		default:
			p := &Process{FD: pidfd.NewFD(fds[0]), pid: m.Pid, exited: make(chan struct{}), status: -1}
			s.mu.Lock()
			s.kids[p.pid] = p
			s.mu.Unlock()
			s.answers <- answer{p: p}
		}
	}
	s.conn.Close()
	sharedMu.Lock()
	close(s.gone)
	sharedMu.Unlock()
	s.mu.Lock()
	kids := s.kids
	s.kids = nil
	s.mu.Unlock()
	for _, p := range kids {
		go p.watch()
	}
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// Process is one process the helper started. Its pidfd names it for good:
// no signal reaches a later process that reuses its pid.
type Process struct {
	*pidfd.FD // closed once it has exited
	pid       int
	status    int // raw wait status, -1 if unknown
	exited    chan struct{}
	once      sync.Once
}

// Pid is the process id.
func (p *Process) Pid() int { return p.pid }

// Exited is closed once the process has exited and been reaped.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// ExitCode is the exit status once Exited is closed: -1 if a signal ended
// the process, or if its status is unknown (the helper ended first).
func (p *Process) ExitCode() int {
	ws := syscall.WaitStatus(p.status)
	if p.status < 0 || !ws.Exited() {
		return -1
	}
	return ws.ExitStatus()
}

func (p *Process) exit(status int) {
	p.once.Do(func() {
		p.status = status
		p.Close()
		close(p.exited)
	})
}

// watch waits on the pidfd for a process whose helper has ended (it was
// reparented, or its parent-death signal ended it).
func (p *Process) watch() {
	p.Wait()
	p.exit(-1)
}
