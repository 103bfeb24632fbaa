package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/cordon-sandbox/cordon/internal/privdir"
	"golang.org/x/sys/unix"
)

// registryOwner is the id of the daemon whose registry is in stateDir,
// made once with it (the file owner there): what its sandboxes' directory
// and its pods are claimed by. It follows the registry, not the host or
// a path, so that two daemons sharing a cluster (or, one after the other,
// a directory) never take each other's sandboxes for their own.
func registryOwner(stateDir string) (string, error) {
	if err := privdir.Ensure(stateDir, 0o700); err != nil {
		return "", fmt.Errorf("registry directory: %w", err)
	}
	p := filepath.Join(stateDir, "owner")
	for {
		b, err := os.ReadFile(p)
		if err == nil {
			id := strings.TrimSpace(string(b))
			if _, herr := hex.DecodeString(id); herr != nil || len(id) != 12 {
				return "", fmt.Errorf("%s holds %q, not a daemon's id (12 hex digits)", p, id)
			}
			return id, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		// Written whole beside it, then linked in place: the id is there
		// complete or not at all, however the daemon ends, and of two
		// daemons making it at once, one's is kept and both read it.
		var rnd [6]byte
		_, _ = rand.Read(rnd[:])
		f, err := os.CreateTemp(stateDir, ".owner-")
		if err != nil {
			return "", err
		}
		_, err = f.WriteString(hex.EncodeToString(rnd[:]) + "\n")
		if err == nil {
			err = f.Sync()
		}
		f.Close()
		if err == nil {
			err = os.Link(f.Name(), p)
		}
		os.Remove(f.Name())
		if err != nil && !errors.Is(err, fs.ErrExist) {
			return "", err
		}
	}
}

// claimSandboxDir claims dir, where a daemon keeps its sandboxes, for the
// daemon whose registry is registry (its id owner): for as long as it runs
// (an exclusive lock, which the kernel lets go however it ends), and, when
// durable, after it (the registry is recorded there: an ephemeral
// daemon's sandboxes go with it). At start a daemon removes every sandbox
// in dir that its registry does not know: a second daemon with a registry
// of its own once destroyed all of the first one's sandboxes that way,
// running beside it or started after it. It is refused instead, told
// whose the directory is and what to do, as long as that registry is
// there to take them back; one that is gone (removed, or made anew) can
// take back nothing, and the directory is the new daemon's.
func claimSandboxDir(dir, registry, owner string, durable bool) (*os.File, error) {
	name := filepath.Join(dir, ".serve.lock")
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	locked := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	// The record, read once locked where it could be: owner pid registry.
	record, _ := os.ReadFile(name)
	fields := strings.SplitN(strings.TrimSpace(string(record)), " ", 3)
	theirs := "another cordon serve"
	if len(fields) == 3 {
		theirs = fmt.Sprintf("the cordon serve whose registry is %s (id %s, last pid %s)", fields[2], fields[0], fields[1])
	}
	if err := locked; err != nil {
		f.Close()
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock %s: %v", name, err)
		}
		if len(fields) == 3 && fields[0] == owner {
			return nil, fmt.Errorf("a cordon serve of this registry (%s) is running already (pid %s)", fields[2], fields[1])
		}
		return nil, fmt.Errorf("%s keeps its sandboxes in %s, and is running; a daemon removes the sandboxes there that its registry does not know: give this one a directory of its own with CORDON_STATE_DIR=DIR (its sandboxes go in DIR/serve)", theirs, dir)
	}
	if len(fields) == 3 && fields[0] != owner && registryHolds(fields[2], fields[0]) {
		f.Close()
		return nil, fmt.Errorf("%s keeps its sandboxes in %s, and a daemon removes the sandboxes there that its registry does not know: give this one a directory of its own with CORDON_STATE_DIR=DIR (its sandboxes go in DIR/serve), or, to let those sandboxes go, remove %s", theirs, dir, name)
	}
	if durable {
		abs, _ := filepath.Abs(registry)
		_ = f.Truncate(0)
		_, _ = f.WriteAt([]byte(fmt.Sprintf("%s %d %s\n", owner, os.Getpid(), abs)), 0)
	}
	return f, nil
}

// registryHolds reports whether the registry in stateDir is still the one
// whose id is owner.
func registryHolds(stateDir, owner string) bool {
	b, err := os.ReadFile(filepath.Join(stateDir, "owner"))
	return err == nil && strings.TrimSpace(string(b)) == owner
}
