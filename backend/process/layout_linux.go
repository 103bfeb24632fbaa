package process

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/cordon-sandbox/cordon/agent/sandboxinit"
	"github.com/cordon-sandbox/cordon/internal/spawnthread"
	"github.com/cordon-sandbox/cordon/sandbox"
)

// LayoutRoot is where layout directories appear inside the sandbox.
const LayoutRoot = "/mnt/user-data"

// layoutMount is one layout directory to bind.
type layoutMount struct {
	host, target string
	readOnly     bool
}

func layoutMounts(l sandbox.Layout) ([]layoutMount, error) {
	var out []layoutMount
	for _, m := range []struct {
		host, name string
		ro         bool
	}{
		{l.Outputs, "outputs", false}, {l.Uploads, "uploads", true}, {l.Scratch, "scratch", false},
		{l.ToolResults, "tool-results", true}, {l.Transcripts, "transcripts", true}, {l.Skills, "skills", true},
	} {
		if m.host == "" {
			continue
		}
		abs, err := filepath.Abs(m.host)
		if err != nil {
			return nil, err
		}
		st, err := os.Stat(abs)
		if err != nil {
			return nil, fmt.Errorf("%w: layout %s: %v", sandbox.ErrInvalidSpec, m.name, err)
		}
		if !st.IsDir() {
			return nil, fmt.Errorf("%w: layout %s: %s is not a directory", sandbox.ErrInvalidSpec, m.name, abs)
		}
		out = append(out, layoutMount{host: abs, target: LayoutRoot + "/" + m.name, readOnly: m.ro})
	}
	return out, nil
}

// idmappedTrees clones each layout directory into a detached mount whose
// ids are mapped so that the directory's owner on the host is the sandbox
// user inside: what the sandbox writes lands on the host owned by that
// owner, and nothing is chowned. The trees are handed to the init, which
// attaches them.
func idmappedTrees(agent string, mounts []layoutMount, kuid, kgid int) ([]*os.File, error) {
	var files []*os.File
	fail := func(err error) ([]*os.File, error) {
		for _, f := range files {
			f.Close()
		}
		return nil, err
	}
	for _, m := range mounts {
		var st unix.Stat_t
		if err := unix.Stat(m.host, &st); err != nil {
			return fail(err)
		}
		userns, err := holdUserns(agent, int(st.Uid), int(st.Gid), kuid, kgid)
		if err != nil {
			return fail(err)
		}
		fd, err := unix.OpenTree(unix.AT_FDCWD, m.host, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
		if err != nil {
			userns.Close()
			return fail(fmt.Errorf("%w: clone %s: %v", sandbox.ErrUnavailable, m.host, err))
		}
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV, Userns_fd: uint64(userns.Fd())}
		if m.readOnly {
			attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
		}
		err = unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr)
		userns.Close()
		if err != nil {
			unix.Close(fd)
			return fail(fmt.Errorf("%w: id-mapped mount of %s (needs a kernel and file system with id-mapped mounts): %v", sandbox.ErrUnavailable, m.host, err))
		}
		files = append(files, os.NewFile(uintptr(fd), m.host))
	}
	return files, nil
}

// holdUserns returns a user namespace mapping host uid/gid (inside it) to
// the sandbox user's kuid/kgid (outside it), held by a short-lived helper.
func holdUserns(agent string, uid, gid, kuid, kgid int) (*os.File, error) {
	cmd := exec.Command(agent, sandboxinit.HoldArg)
	cmd.Args[0] = "cordon-agent"
	cmd.Env = []string{}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: uid, HostID: kuid, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: gid, HostID: kgid, Size: 1}},
		Pdeathsig:   syscall.SIGKILL,
	}
	if spawnthread.Do(func() { err = cmd.Start() }); err != nil {
		return nil, fmt.Errorf("%w: user namespace for an id-mapped mount: %v", sandbox.ErrUnavailable, err)
	}
	defer func() {
		stdin.Close()
		_ = cmd.Wait()
	}()
	return os.Open("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/ns/user")
}
