package microvm

// The guest's control port, on which the host asks its init to power off
// (flushing a persistent workspace's disk) and to freeze and thaw that
// disk; and the waits a VM's disk needs.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cordon-sandbox/cordon/agent/vminit"
	"github.com/cordon-sandbox/cordon/sandbox"
	"golang.org/x/sys/unix"
)

var _ sandbox.DiskFreezer = (*instance)(nil)

// powerOffGrace bounds a guest's flush of its disk and power-off.
const powerOffGrace = 30 * time.Second

// awaitPowerOff asks the guest, through its control port, to flush its
// disks and power off, resuming it first if it is paused, and waits for
// at most powerOffGrace (or ctx). It reports whether the VMM ended.
func (vm *instance) awaitPowerOff(ctx context.Context) bool {
	if vm.control == nil {
		return false
	}
	if vm.paused.Load() {
		if err := (QEMU{Binary: vm.b.cfg.QEMU}).Resume(ctx, filepath.Join(vm.dir, "monitor.sock")); err != nil {
			return false
		}
	}
	vm.controlMu.Lock()
	_, err := io.WriteString(vm.control, vminit.PowerOff)
	vm.controlMu.Unlock()
	if err != nil {
		return false
	}
	select {
	case <-vm.exited:
		return true
	case <-ctx.Done():
	case <-time.After(powerOffGrace):
	}
	return false
}

// awaitUnlocked waits, for at most powerOffGrace (or ctx), until no
// VMM holds image: a VM of an earlier process of the host's (one killed,
// whose guest then flushes its disk and powers off) may still hold it,
// and QEMU locks the images it writes (OFD locks from byte 100 on).
func awaitUnlocked(ctx context.Context, image string) error {
	f, err := os.Open(image)
	if err != nil {
		return err
	}
	defer f.Close()
	deadline := time.Now().Add(powerOffGrace)
	for {
		lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 100, Len: 200}
		if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_GETLK, &lk); err != nil {
			return err
		}
		if lk.Type == unix.F_UNLCK {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("another VMM still holds %s after %v", image, powerOffGrace)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// FreezeDisk has the guest freeze its persistent workspace's disk (its
// writes flushed and held), for a copy of the image; thaw lets it go. The
// guest lets a freeze go by itself after vminit.FreezeBound.
func (vm *instance) FreezeDisk(ctx context.Context) (func() error, error) {
	if !vm.disk || vm.control == nil {
		return nil, errors.New("the VM has no disk attached")
	}
	if err := vm.ask(ctx, vminit.Freeze); err != nil {
		return nil, fmt.Errorf("freeze the guest's disk: %w", err)
	}
	return func() error {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := vm.ask(ctx, vminit.Thaw); err != nil {
			return fmt.Errorf("thaw the guest's disk: %w", err)
		}
		return nil
	}, nil
}

// ask sends the guest's init a request on the control port and reads its
// answer, held to ctx (10 s without a deadline).
func (vm *instance) ask(ctx context.Context, req string) error {
	vm.controlMu.Lock()
	defer vm.controlMu.Unlock()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(10 * time.Second)
	}
	_ = vm.control.SetDeadline(deadline)
	defer vm.control.SetDeadline(time.Time{})
	if _, err := io.WriteString(vm.control, req); err != nil {
		return err
	}
	// One byte at a time: nothing past the answer is taken.
	var line []byte
	var b [1]byte
	for len(line) < 512 {
		if _, err := vm.control.Read(b[:]); err != nil {
			return err
		}
		if b[0] == '\n' {
			if a := string(line) + "\n"; a != vminit.Done {
				return errors.New(strings.TrimSpace(a))
			}
			return nil
		}
		line = append(line, b[0])
	}
	return errors.New("the guest's answer is too long")
}
