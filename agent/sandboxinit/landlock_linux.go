package sandboxinit

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Landlock is the second layer under the mount table: even if a writable
// path were somehow reachable outside the writable mounts, the kernel refuses
// the write. Only write-type rights are handled; reads stay governed by the
// mount table alone.

// LandlockABI reports the kernel's Landlock ABI version, 0 when absent.
func LandlockABI() int {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		return 0
	}
	return int(v)
}

func writeRights(abi int) uint64 {
	r := uint64(unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_REMOVE_DIR |
		unix.LANDLOCK_ACCESS_FS_REMOVE_FILE | unix.LANDLOCK_ACCESS_FS_MAKE_CHAR | unix.LANDLOCK_ACCESS_FS_MAKE_DIR |
		unix.LANDLOCK_ACCESS_FS_MAKE_REG | unix.LANDLOCK_ACCESS_FS_MAKE_SOCK | unix.LANDLOCK_ACCESS_FS_MAKE_FIFO |
		unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK | unix.LANDLOCK_ACCESS_FS_MAKE_SYM)
	if abi >= 2 {
		r |= unix.LANDLOCK_ACCESS_FS_REFER
	}
	if abi >= 3 {
		r |= unix.LANDLOCK_ACCESS_FS_TRUNCATE
	}
	return r
}

// fileRights are the write rights that apply to a file (not a directory).
func fileRights(abi int) uint64 {
	r := uint64(unix.LANDLOCK_ACCESS_FS_WRITE_FILE)
	if abi >= 3 {
		r |= unix.LANDLOCK_ACCESS_FS_TRUNCATE
	}
	return r
}

// landlockRule grants rights beneath path (a directory) or on it (a file).
type landlockRule struct {
	path   string
	rights uint64
}

// buildRuleset makes a ruleset allowing writes only under the given paths.
// It is made before seccomp closes landlock_create_ruleset.
func buildRuleset(abi int, rules []landlockRule) (int, error) {
	attr := unix.LandlockRulesetAttr{Handled_access_fs: writeRights(abi)}
	// Only the first field is used; older kernels know no more.
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr.Handled_access_fs), 0)
	if errno != 0 {
		return -1, fmt.Errorf("landlock_create_ruleset: %w", errno)
	}
	for _, r := range rules {
		pfd, err := unix.Open(r.path, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			unix.Close(int(fd))
			return -1, fmt.Errorf("landlock rule %s: %w", r.path, err)
		}
		pb := unix.LandlockPathBeneathAttr{Allowed_access: r.rights & attr.Handled_access_fs, Parent_fd: int32(pfd)}
		_, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, fd, unix.LANDLOCK_RULE_PATH_BENEATH, uintptr(unsafe.Pointer(&pb)), 0, 0, 0)
		unix.Close(pfd)
		if errno != 0 {
			unix.Close(int(fd))
			return -1, fmt.Errorf("landlock rule %s: %w", r.path, errno)
		}
	}
	return int(fd), nil
}

// restrictSelf confines the calling thread (and what it forks or execs)
// with the ruleset, and closes it.
func restrictSelf(fd int) error {
	defer unix.Close(fd)
	if _, _, errno := unix.RawSyscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(fd), 0, 0); errno != 0 {
		return fmt.Errorf("landlock_restrict_self: %w", errno)
	}
	return nil
}

// Variables that ask a container's agent (started by an OCI runtime, not
// by this package's init) to confine its commands itself.
