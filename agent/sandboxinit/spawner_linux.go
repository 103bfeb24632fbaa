package sandboxinit

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"syscall"

	"github.com/cordon-sandbox/cordon/agent/clonexec"
	"golang.org/x/sys/unix"
)

// Spawner serves spawn requests on SpawnerFD until the host closes its end,
// then returns. The host started it with a parent-death signal; the
// processes it starts carry whatever parent-death signal their request
// asks for, which fires when the spawner ends.
func Spawner() int {
	f := os.NewFile(SpawnerFD, "spawner")
	c, err := net.FileConn(f)
	f.Close()
	conn, ok := c.(*net.UnixConn)
	if err != nil || !ok {
		fmt.Fprintf(os.Stderr, "cordon-agent spawner: descriptor %d is not a unix socket: %v\n", SpawnerFD, err)
		return 1
	}
	s := &spawner{conn: conn, start: make(chan func()), answered: map[int]bool{}, early: map[int]int{}}
	// Starts go through clonexec, which does not copy this process's
	// memory, when it knows the limit on open files to give back to them
	// (see clonexec.OriginalNofile); it is learnt before any child can be
	// reaped by the loop below.
	if clonexec.Available {
		if lim, err := clonexec.OriginalNofile("/proc/self/exe"); err == nil {
			s.nofile = &lim
		} else {
			fmt.Fprintf(os.Stderr, "cordon-agent spawner: starting processes with syscall.ForkExec: %v\n", err)
		}
	}
	// SIGCHLD is asked for before any process can start: until then it is
	// ignored, and a child that exits first would never be reaped.
	sigchld := make(chan os.Signal, 1)
	signal.Notify(sigchld, syscall.SIGCHLD)
	go s.reap(sigchld)
	// Every process is started from this one locked thread, which lives as
	// long as the spawner: a parent-death signal fires when the thread that
	// forked exits, not the process.
	go func() {
		runtime.LockOSThread()
		for f := range s.start {
			f()
		}
	}()
	buf := make([]byte, MaxSpawnRequestBytes+1)
	oob := make([]byte, unix.CmsgSpace(MaxSpawnFiles*4))
	for {
		n, oobn, flags, _, err := conn.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			return 0 // the host is gone, or let us go
		}
		fds, perr := ReceivedFDs(oob[:oobn])
		files := make([]*os.File, len(fds))
		for i, fd := range fds {
			files[i] = os.NewFile(uintptr(fd), "")
		}
		switch {
		case flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 || n > MaxSpawnRequestBytes:
			s.answer(SpawnMessage{Error: "spawn request over its bounds"}, -1)
		case perr != nil:
			s.answer(SpawnMessage{Error: perr.Error()}, -1)
		default:
			s.serve(buf[:n], files)
		}
		for _, f := range files {
			f.Close()
		}
	}
}

type spawner struct {
	conn   *net.UnixConn
	sendMu sync.Mutex
	start  chan func()
	nofile *unix.Rlimit // this process's original RLIMIT_NOFILE; nil when unknown

	// Exits are reaped by one loop (not a waiting thread per process) and
	// sent only after the process's start was answered: mu orders the two.
	mu       sync.Mutex
	answered map[int]bool
	early    map[int]int // reaped before its start was answered: pid → status
}

// reap waits for every child that has exited, whenever sig says one has.
func (s *spawner) reap(sig <-chan os.Signal) {
	for range sig {
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
			s.mu.Lock()
			if s.answered[pid] {
				delete(s.answered, pid)
				s.answer(SpawnMessage{Exited: pid, Status: int(ws)}, -1)
			} else {
				s.early[pid] = int(ws)
			}
			s.mu.Unlock()
		}
	}
}

// ReceivedFDs are the descriptors an SCM_RIGHTS control message carried
// (oob as recvmsg filled it). On an error, those parsed so far are
// returned too, for the caller to close.
func ReceivedFDs(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	for _, m := range msgs {
		got, err := unix.ParseUnixRights(&m)
		if err != nil {
			return fds, err
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

func (s *spawner) serve(req []byte, files []*os.File) {
	var r SpawnRequest
	if err := json.Unmarshal(req, &r); err != nil {
		s.answer(SpawnMessage{Error: "unreadable spawn request: " + err.Error()}, -1)
		return
	}
	attr := r.Sys
	if attr == nil {
		attr = &syscall.SysProcAttr{}
	}
	if attr.UseCgroupFD || attr.PidFD != nil || len(files) < 3 {
		// Descriptor numbers of the host's mean nothing here.
		s.answer(SpawnMessage{Error: "spawn request needs standard input, output and error, and no cgroup or pidfd descriptor"}, -1)
		return
	}
	fds := make([]uintptr, len(files))
	ints := make([]int, len(files))
	for i, f := range files {
		fds[i] = f.Fd()
		ints[i] = int(fds[i])
	}
	// The pidfd comes from the clone itself: the process may exit, and be
	// reaped, before this goroutine runs again.
	pidfd := -1
	var pid int
	var err error
	done := make(chan struct{})
	s.start <- func() {
		defer close(done)
		if s.nofile != nil && clonexec.Supported(attr) {
			pid, pidfd, err = clonexec.Start(r.Path, r.Args, r.Env, r.Dir, ints, attr, s.nofile, nil)
			return
		}
		attr.PidFD = &pidfd
		pid, err = syscall.ForkExec(r.Path, r.Args, &syscall.ProcAttr{Dir: r.Dir, Env: r.Env, Files: fds, Sys: attr})
	}
	<-done
	if err != nil {
		// A child that failed to exec may have been reaped by the loop
		// before ForkExec could; no other start is in flight.
		s.mu.Lock()
		clear(s.early)
		s.mu.Unlock()
		s.answer(SpawnMessage{Error: err.Error()}, -1)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answer(SpawnMessage{Pid: pid}, pidfd)
	unix.Close(pidfd)
	if status, ok := s.early[pid]; ok {
		delete(s.early, pid)
		s.answer(SpawnMessage{Exited: pid, Status: status}, -1)
	} else {
		s.answered[pid] = true
	}
}

// answer sends m, with fd (when not -1) as SCM_RIGHTS. A host that cannot
// be written to is gone: the spawner ends.
func (s *spawner) answer(m SpawnMessage, fd int) {
	b, _ := json.Marshal(m)
	var oob []byte
	if fd >= 0 {
		oob = unix.UnixRights(fd)
	}
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if _, _, err := s.conn.WriteMsgUnix(b, oob, nil); err != nil && !errors.Is(err, syscall.EINTR) {
		os.Exit(0)
	}
}
