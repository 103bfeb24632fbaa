package agent

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/cordon-sandbox/cordon/baseline"

	"golang.org/x/sys/unix"
)

// TokenFileToFD reads the token from the file CORDON_AGENT_TOKEN_FILE
// names (a mounted secret, readable by the sandbox's root alone) and puts
// it in a pipe that CORDON_AGENT_TOKEN_FD then names, so that Main reads
// it as it reads any token handed over on a descriptor. It runs before the
// agent gives up root's identity (sandboxinit.ContainerOptions), after
// which the file is out of its reach, as it is out of the workload's.
func TokenFileToFD() error {
	path, ok := os.LookupEnv(EnvPrefix + "TOKEN_FILE")
	if !ok {
		return nil
	}
	if _, set := os.LookupEnv(EnvPrefix + "TOKEN"); set {
		return fmt.Errorf("set CORDON_AGENT_TOKEN or CORDON_AGENT_TOKEN_FILE, not both")
	}
	if _, set := os.LookupEnv(EnvPrefix + "TOKEN_FD"); set {
		return fmt.Errorf("set CORDON_AGENT_TOKEN_FD or CORDON_AGENT_TOKEN_FILE, not both")
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("CORDON_AGENT_TOKEN_FILE: %w", err)
	}
	defer f.Close()
	// One byte past the bound, to tell a token that is too long.
	b, err := io.ReadAll(io.LimitReader(f, 4097))
	if err != nil {
		return fmt.Errorf("CORDON_AGENT_TOKEN_FILE: %w", err)
	}
	if len(b) > 4096 {
		return fmt.Errorf("CORDON_AGENT_TOKEN_FILE %s holds more than 4096 bytes", path)
	}
	// Bare descriptors: Main wraps the read end and closes it (an
	// *os.File here would close it again when collected).
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return err
	}
	// A pipe holds far more than 4096 bytes: the write does not block.
	_, err = unix.Write(p[1], b)
	unix.Close(p[1])
	if err != nil {
		unix.Close(p[0])
		return err
	}
	os.Unsetenv(EnvPrefix + "TOKEN_FILE")
	return os.Setenv(EnvPrefix+"TOKEN_FD", strconv.Itoa(p[0]))
}

// Install copies this program to dest, read-only and executable by all:
// a cluster's init container puts the agent where the sandbox's own image
// runs it from.
func Install(dest string) error {
	src, err := os.Open("/proc/self/exe")
	if err != nil {
		return err
	}
	defer src.Close()
	out, err := os.OpenFile(dest, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o555)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, src); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// Accounts writes to dir the image's /etc/passwd and /etc/group with the
// sandbox user uid added (baseline.MergeAccounts): a cluster's init
// container runs it in the sandbox's own image, and the pod binds the two
// files over the image's.
func Accounts(uid int, dir string) error {
	read := func(path string) (string, error) {
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil
		}
		if len(b) > 1<<20 {
			return "", fmt.Errorf("%s is over 1 MiB", path)
		}
		return string(b), err
	}
	passwd, err := read("/etc/passwd")
	if err != nil {
		return err
	}
	group, err := read("/etc/group")
	if err != nil {
		return err
	}
	passwd, group = baseline.MergeAccounts(passwd, group, uid)
	if err := os.WriteFile(filepath.Join(dir, "passwd"), []byte(passwd), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "group"), []byte(group), 0o644)
}
