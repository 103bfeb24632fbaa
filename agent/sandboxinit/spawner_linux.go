package sandboxinit

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"

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
	s := &spawner{conn: conn, start: make(chan func())}
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
		fds, perr := receivedFDs(oob[:oobn])
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
}

func receivedFDs(oob []byte) ([]int, error) {
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
	var p *os.Process
	var err error
	done := make(chan struct{})
	s.start <- func() {
		defer close(done)
		p, err = os.StartProcess(r.Path, r.Args, &os.ProcAttr{Dir: r.Dir, Env: r.Env, Files: files, Sys: attr})
	}
	<-done
	if err != nil {
		s.answer(SpawnMessage{Error: err.Error()}, -1)
		return
	}
	// The process is this one's child and not yet waited for, so its pid
	// names it still.
	pidfd, err := unix.PidfdOpen(p.Pid, 0)
	if err != nil {
		_ = p.Kill()
		_, _ = p.Wait()
		s.answer(SpawnMessage{Error: "pidfd: " + err.Error()}, -1)
		return
	}
	s.answer(SpawnMessage{Pid: p.Pid}, pidfd)
	unix.Close(pidfd)
	go func() {
		st, err := p.Wait()
		status := -1
		if err == nil {
			if ws, ok := st.Sys().(syscall.WaitStatus); ok {
				status = int(ws)
			}
		}
		s.answer(SpawnMessage{Exited: p.Pid, Status: status}, -1)
	}()
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
