package vminit

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

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
		}
		line = line[:0]
	}
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
