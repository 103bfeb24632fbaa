package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// lockSandboxDir claims dir, where a daemon keeps its sandboxes, for this
// daemon, whose registry is registry, until it exits (the kernel lets the
// lock go however it ends). At start a daemon removes every sandbox there
// that its registry does not explain: a second daemon with a registry of
// its own, sharing the directory, once destroyed all of the first one's
// sandboxes that way. It is refused instead, told how to give its
// sandboxes a directory of their own.
func lockSandboxDir(dir, registry string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, ".serve.lock"), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(f.Name())
		f.Close()
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock %s: %v", f.Name(), err)
		}
		who := "another cordon serve"
		if pid, reg, ok := strings.Cut(strings.TrimSpace(string(holder)), " "); ok {
			if _, err := strconv.Atoi(pid); err == nil {
				who = fmt.Sprintf("another cordon serve (pid %s, registry %s)", pid, reg)
			}
		}
		return nil, fmt.Errorf("%s keeps its sandboxes in %s, and a daemon removes those its registry does not know: give this one a directory of its own with CORDON_STATE_DIR=DIR (its sandboxes go in DIR/serve)", who, dir)
	}
	abs, _ := filepath.Abs(registry)
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(fmt.Sprintf("%d %s\n", os.Getpid(), abs)), 0)
	return f, nil
}
