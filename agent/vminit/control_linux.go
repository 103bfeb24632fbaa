package vminit

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// serveControl reads the host's requests on the control port until it
// asks the guest to power off (PowerOff), then ends the agent: the init
// then flushes the file systems and powers the guest off (Main). It
// freezes and thaws a persistent workspace's disk (Freeze, Thaw), if one
// is attached, each answered with Done or an error.
func serveControl(control *os.File, agent *spawned, disk bool) {
	var frozen diskFreeze
	answer := func(err error) {
		if err != nil {
			fmt.Fprintf(control, "error %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
			return
		}
		io.WriteString(control, Done)
	}
	var line []byte
	for {
		b, err := hostByte(control)
		if err != nil {
			return
		}
		if b != '\n' {
			if line = append(line, b); len(line) > 64 {
				line = line[:0]
			}
			continue
		}
		switch string(line) + "\n" {
		case PowerOff:
			_ = frozen.thaw()
			_ = agent.cmd.Process.Kill()
			return
		case Freeze:
			if !disk {
				answer(errors.New("no disk is attached"))
			} else {
				answer(frozen.freeze())
			}
		case Thaw:
			answer(frozen.thaw())
		case Dump:
			dumpState(os.Stderr, agent.cmd.Process.Pid)
			answer(nil)
		}
		line = line[:0]
	}
}

// dumpState writes to w (the console) what each of the guest's processes
// is doing: its state, and where in the kernel it waits, with the
// kernel's stack of each that cannot be woken (state D); then it has the
// agent's process (pid) write its goroutines' stacks and end (SIGQUIT, the
// Go runtime's dump). A host asks for it only when it is about to tear the
// guest down. It is bounded: at most 256 processes, each stack 4 KiB.
func dumpState(w io.Writer, agent int) {
	var b strings.Builder
	fmt.Fprintf(&b, "cordon: the guest's state, as the host asked before it tears the guest down\n")
	var loads [64]byte
	if n, _ := readUpTo("/proc/loadavg", loads[:]); n > 0 {
		fmt.Fprintf(&b, "load: %s", loads[:n])
	}
	dir, _ := os.ReadDir("/proc")
	shown := 0
	for _, e := range dir {
		pid := e.Name()
		if pid[0] < '0' || pid[0] > '9' {
			continue
		}
		var stat [512]byte
		n, err := readUpTo("/proc/"+pid+"/stat", stat[:])
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		st := string(stat[:n])
		end := strings.LastIndexByte(st, ')')
		open := strings.IndexByte(st, '(')
		if open < 0 || end < open {
			continue
		}
		f := strings.Fields(st[end+1:])
		if len(f) < 2 || f[1] == "2" || pid == "2" {
			continue // a kernel thread
		}
		if shown++; shown > 256 {
			b.WriteString("(more processes not shown)\n")
			break
		}
		var wchan [64]byte
		k, _ := readUpTo("/proc/"+pid+"/wchan", wchan[:])
		// (A process names itself: its name is shown as text, never as
		// bytes that act on the terminal the diagnostics reach.)
		fmt.Fprintf(&b, "%s (%s) %s ppid %s wchan %s\n", pid, graphic(st[open+1:end]), f[0], f[1], graphic(string(wchan[:k])))
		if f[0] == "D" {
			var stack [4096]byte
			if k, _ := readUpTo("/proc/"+pid+"/stack", stack[:]); k > 0 {
				b.Write(stack[:k])
			}
		}
	}
	io.WriteString(w, b.String())
	_ = unix.Kill(agent, unix.SIGQUIT)
}

// graphic is s as it is where it is all graphic UTF-8, else quoted with its
// other characters escaped, as internal/printable has it (which the
// agent's binary does not link).
func graphic(s string) string {
	if utf8.ValidString(s) && strings.IndexFunc(s, func(r rune) bool { return !strconv.IsGraphic(r) }) < 0 {
		return s
	}
	return strconv.QuoteToGraphic(s)
}

// readUpTo reads at most len(buf) bytes of the file at path.
func readUpTo(path string, buf []byte) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n, err := io.ReadFull(f, buf)
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		err = nil
	}
	return n, err
}

// hostByte reads the next byte the host writes on port. While no host is
// connected the port reads end of file: it is read again shortly.
func hostByte(port *os.File) (byte, error) {
	var b [1]byte
	for {
		n, err := port.Read(b[:])
		if n == 1 {
			return b[0], nil
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// diskFreeze is the persistent workspace's disk held frozen (FIFREEZE),
// or not; a freeze is let go after FreezeBound if no thaw comes, so a host
// gone mid-copy cannot hang the sandbox.
type diskFreeze struct {
	mu     sync.Mutex
	frozen *os.File // the disk's mount, while frozen
	bound  *time.Timer
}

func (d *diskFreeze) freeze() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.frozen != nil {
		return nil
	}
	f, err := os.Open(diskMount)
	if err != nil {
		return err
	}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), fiFreeze, 0); e != 0 {
		f.Close()
		return e
	}
	d.frozen, d.bound = f, time.AfterFunc(FreezeBound, func() { _ = d.thaw() })
	return nil
}

func (d *diskFreeze) thaw() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.frozen == nil {
		return nil
	}
	d.bound.Stop()
	_, _, e := unix.Syscall(unix.SYS_IOCTL, d.frozen.Fd(), fiThaw, 0)
	d.frozen.Close()
	d.frozen = nil
	if e != 0 {
		return e
	}
	return nil
}

// fiFreeze and fiThaw are FIFREEZE and FITHAW (_IOWR('X', 119/120, int)).
const (
	fiFreeze = 0xc0045877
	fiThaw   = 0xc0045878
)
