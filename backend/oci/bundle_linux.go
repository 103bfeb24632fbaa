package oci

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cordon-sandbox/cordon/agent/sandboxinit"
	"github.com/cordon-sandbox/cordon/backend/host"
	"github.com/cordon-sandbox/cordon/baseline"
	"github.com/cordon-sandbox/cordon/sandbox"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// ociVersion is the runtime-spec version bundles declare: the newest that
// Debian's crun 1.8 and runc 1.1 both accept, and all this bundle uses.
const ociVersion = "1.0.2"

// oldGVisorHeadroom is what a 2022 gVisor's RLIMIT_NPROC adds to a pids
// limit for the agent's threads and its commands' first processes
// (taskLimit).
const oldGVisorHeadroom = 16

// gvisorCgroups is where a gVisor sandbox's own cgroups are mounted.
const gvisorCgroups = "/sys/fs/cgroup"

type bundleInput struct {
	Bundle    string // the bundle directory, created here
	RootSrc   string // the root filesystem's source ("/" for the host's)
	HostRoot  bool   // RootSrc is the host's own root: keep only system directories, mask secrets
	SocketDir string // host directory bound at baseline.SocketDir
	AgentPath string
	Identity  []sandboxinit.Bind
	// Layout directories, each Host an id-mapped mount the backend has
	// attached under the sandbox's state directory.
	Layout []host.LayoutMount
	Env    []string
	UID    int
	IDBase int
	IDSize int
	// UserNS, when set, is the path of a user namespace of these ids for
	// the container to join (host.OwnedUserns), rather than one the
	// runtime makes.
	UserNS string
	Limits sandbox.Limits
	// ScratchBudget bounds the scratch tmpfs mounts together when there is
	// no memory limit (each gets a share of it); 0 leaves each the
	// kernel's default size.
	ScratchBudget int64
	// CgroupsPath is the container's cgroup, under the runtime's hierarchy.
	CgroupsPath string
	// UserSpaceKernel: the runtime is gVisor, whose sentry applies the
	// filter itself and answers every denial EPERM (it ignores errnoRet).
	UserSpaceKernel bool
	// OwnCgroups: the user-space kernel has cgroups of its own, where the
	// workload's pids limit is held (sandboxinit.EnvCommandPids).
	OwnCgroups bool
	// Skeletons, when set, is a directory where skeleton roots are kept
	// and shared between bundles (see skeleton.shared); otherwise the
	// bundle has its own.
	Skeletons string
	// Landlock, "auto" or "require", has the agent confine its commands
	// to the writable mounts (sandboxinit.ContainerOptions); "" for none.
	Landlock string
	// Lifeline: the token's descriptor stays open as the agent's lifeline
	// (agent.Options.Lifeline), the token ending at a newline.
	Lifeline bool
	// CommandsApart: the host holds the workload's pids in a cgroup of
	// their own (Backend.commandsApart), so the agent needs no spare
	// threads.
	CommandsApart bool
	// Disk, when set, is the sandbox's disk as mounted on the host
	// (host.MountDisk): the scratch directories are its directories, not
	// memory.
	Disk string
}

// ScratchBudget is what the scratch space of a sandbox without a memory
// limit holds in all: half the host's memory, the kernel's default for one
// tmpfs, and the process tier's bound for its one scratch filesystem.
func ScratchBudget() int64 {
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) != nil {
		return 0
	}
	return int64(si.Totalram) * int64(si.Unit) / 2
}

// buildSpec lays out the bundle's root and returns its configuration. The
// root is a skeleton directory holding only mount points: the source root's
// top-level directories are bound onto it read-only (and its top-level
// symlinks copied), so every mount point exists before the container starts
// and nothing of the source is ever written.
func buildSpec(in bundleInput) (*specs.Spec, error) {
	if err := os.MkdirAll(in.Bundle, 0o711); err != nil {
		return nil, err
	}
	if err := os.Chmod(in.Bundle, 0o711); err != nil {
		return nil, err
	}
	ro := func(src, dst string) specs.Mount {
		return specs.Mount{Destination: dst, Type: "bind", Source: src, Options: []string{"rbind", "ro", "nosuid", "nodev"}}
	}
	var mounts []specs.Mount
	var sk skeleton
	// The source's entries of these names are not kept: cordon makes its
	// own (empty mount points, its workspace, the agent's directory), and a
	// symlink there from an image would lead the skeleton's making out.
	empty := map[string]bool{"workspace": true, ".cordon": true}
	for _, d := range baseline.EmptyDirs {
		empty[d] = true
	}
	ents, err := os.ReadDir(in.RootSrc)
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		name := e.Name()
		if empty[name] || (in.HostRoot && !baseline.SystemDirs[name]) {
			continue
		}
		src := filepath.Join(in.RootSrc, name)
		switch {
		case e.Type()&os.ModeSymlink != 0:
			target, err := os.Readlink(src)
			if err != nil {
				return nil, err
			}
			sk = append(sk, skeletonEntry{Path: name, Link: target})
		case e.IsDir():
			sk = append(sk, skeletonEntry{Path: name, Mode: 0o755})
			mounts = append(mounts, ro(src, "/"+name))
		}
	}
	// runc gives a tmpfs the mode of the directory it covers, whatever
	// the mount options say: the mount points carry the modes meant.
	for _, d := range append(baseline.EmptyDirs, ".cordon", "run/cordon") {
		mode := os.FileMode(0o755)
		if d == "tmp" {
			mode = os.ModeSticky | 0o777
		}
		sk = append(sk, skeletonEntry{Path: d, Mode: mode})
	}
	for _, d := range baseline.ScratchDirs {
		if d.Path != "/tmp" && d.Path != "/var/tmp" {
			sk = append(sk, skeletonEntry{Path: strings.TrimPrefix(d.Path, "/"), Mode: os.FileMode(d.Mode)})
		}
	}
	sk = append(sk, skeletonEntry{Path: strings.TrimPrefix(baseline.AgentBinary, "/"), Mode: 0o755, File: true})

	for _, m := range in.Layout {
		// Under /mnt, a directory of the skeleton: the mount point is made
		// there, never in the source root.
		sk = append(sk, skeletonEntry{Path: strings.TrimPrefix(m.Target, "/"), Mode: 0o755})
	}
	rootfs := filepath.Join(in.Bundle, "rootfs")
	if in.Skeletons != "" {
		rootfs, err = sk.shared(in.Skeletons)
	} else if err = os.Mkdir(rootfs, 0o755); err == nil {
		err = sk.make(rootfs)
	}
	if err != nil {
		return nil, fmt.Errorf("the bundle's root: %w", err)
	}
	// Scratch space is memory. The runtime mounts each scratch tmpfs on
	// its own, so unlike the process tier's they are not one filesystem:
	// they share the writable space (Limits.Disk, or ScratchBudget without
	// limits), each its baseline share. Together they stay within it
	// (without a limit, four of the kernel's default size, half the host's
	// memory, could pin twice the host's memory, which no OOM kill frees),
	// and below a memory limit, so a full one is ENOSPC.
	budget := in.Limits.Disk()
	if budget == 0 {
		budget = in.ScratchBudget
	}
	mounts = append([]specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: append([]string{"nosuid", "noexec"}, baseline.DevptsOptions...)},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: append([]string{"nosuid", "nodev"}, baseline.ShmOptions()...)},
	}, mounts...)
	for _, d := range baseline.ScratchDirs {
		if d.Path == "/var/tmp" && !isDir(filepath.Join(in.RootSrc, "var", "tmp")) {
			continue
		}
		if in.Disk != "" {
			mounts = append(mounts, specs.Mount{Destination: d.Path, Type: "bind", Source: filepath.Join(in.Disk, baseline.ScratchName(d.Path)), Options: []string{"rbind", "rw", "nosuid", "nodev"}})
			continue
		}
		opts := []string{"nosuid", "nodev", fmt.Sprintf("mode=%o", d.Mode)}
		if d.Owned {
			opts = append(opts, fmt.Sprintf("uid=%d", in.UID), fmt.Sprintf("gid=%d", in.UID))
		}
		if budget > 0 {
			opts = append(opts, baseline.TmpfsLimits(d.Size(budget))...)
		}
		mounts = append(mounts, specs.Mount{Destination: d.Path, Type: "tmpfs", Source: "tmpfs", Options: opts})
	}
	mounts = append(mounts,
		specs.Mount{Destination: baseline.SocketDir, Type: "bind", Source: in.SocketDir, Options: []string{"rbind", "nosuid", "nodev", "noexec"}},
		ro(in.AgentPath, baseline.AgentBinary),
	)
	for _, m := range in.Layout {
		opts := []string{"rbind", "rw", "nosuid", "nodev"}
		if m.ReadOnly {
			opts[1] = "ro"
		}
		mounts = append(mounts, specs.Mount{Destination: m.Target, Type: "bind", Source: m.Host, Options: opts})
	}
	if in.UserSpaceKernel {
		// gVisor's own /dev has a TUN device, which a sandbox never needs
		// (and, with namespaces of its own, could use); runsc applies no
		// masked paths, so a mount covers it. (Its FUSE device cannot be
		// covered: runsc refuses a bind over it, and it is inert without
		// mount(2), which the filter and the missing capability refuse.)
		mounts = append(mounts,
			specs.Mount{Destination: "/dev/net", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "noexec", "mode=755", "size=4k"}})
	}
	for _, f := range in.Identity {
		if fileExists(filepath.Join(in.RootSrc, f.Target)) {
			mounts = append(mounts, ro(f.Source, f.Target))
		}
	}
	masked := []string{}
	for _, p := range baseline.ProcMasked {
		masked = append(masked, "/proc/"+p)
	}
	if in.HostRoot {
		for _, p := range baseline.MaskedPaths {
			// A runtime masks through symlinks: /var/run -> /run would
			// cover the sandbox's own /run. Masking the link's target, if
			// kept, is another entry's job.
			if st, err := os.Lstat(p); err == nil && st.Mode()&os.ModeSymlink == 0 {
				masked = append(masked, p)
			}
		}
	}
	readonly := []string{"/proc/sysrq-trigger"}
	for _, p := range baseline.ProcReadOnly {
		readonly = append(readonly, "/proc/"+p)
	}
	// The agent starts as root of the sandbox with only what it needs to
	// take its own identity apart from the workload's (the user to start
	// commands as, its socket made its own, the bounding set of the
	// thread commands fork from emptied); it keeps CAP_SETUID and
	// CAP_SETGID alone (sandboxinit.ContainerOptions).
	env := append(slices.Clip(in.Env), sandboxinit.EnvWorkload+"="+fmt.Sprintf("%d:%d", in.UID, in.UID))
	if in.Lifeline {
		env = append(env, baseline.EnvPrefix+"LIFELINE=1")
	}
	if in.UserSpaceKernel || in.CommandsApart {
		// The workload's tasks are counted apart from the agent's (a cgroup
		// of their own, or their own user's RLIMIT_NPROC): no spare
		// threads.
		env = append(env, baseline.EnvPrefix+"SPARE_THREADS=0")
	}
	if in.OwnCgroups && in.Limits.Pids > 0 {
		// gVisor's host cgroup holds its kernel, not the workload: the
		// workload's pids limit is its kernel's own pids cgroup, which the
		// agent makes for its commands.
		mounts = append(mounts, specs.Mount{Destination: gvisorCgroups, Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "nodev", "noexec"}})
		env = append(env, fmt.Sprintf("%s=%d:%s/pids", sandboxinit.EnvCommandPids, in.Limits.Pids, gvisorCgroups))
	}
	if in.Landlock != "" {
		env = append(env, sandboxinit.EnvLandlock+"="+in.Landlock,
			sandboxinit.EnvWritable+"="+strings.Join(writableMounts(mounts), ":"))
	}
	none := []string{}
	agentCaps := slices.Clone(baseline.AgentCapabilities)
	if in.UserSpaceKernel {
		// gVisor judges /proc/PID/fd by real ids (sandboxinit's ptraceCap).
		agentCaps = append(agentCaps, "CAP_SYS_PTRACE")
	}
	// The task ceiling is the agent's to set under runc and crun (the
	// namespace they join is not root's: sandboxinit.EnvTasks), gVisor's
	// sentry's under runsc.
	var rlimits []specs.POSIXRlimit
	if l := taskLimit(in); len(l) > 0 && !in.UserSpaceKernel {
		env = append(env, fmt.Sprintf("%s=%d", sandboxinit.EnvTasks, l[0].Hard))
	} else {
		rlimits = l
	}
	s := &specs.Spec{
		Version:  ociVersion,
		Root:     &specs.Root{Path: rootfs, Readonly: true},
		Hostname: baseline.Hostname,
		Mounts:   mounts,
		Process: &specs.Process{
			Args: []string{baseline.AgentBinary},
			Env:  env,
			Cwd:  baseline.Workspace,
			User: specs.User{UID: 0, GID: 0},
			Capabilities: &specs.LinuxCapabilities{
				Bounding: agentCaps, Effective: agentCaps, Permitted: agentCaps, Inheritable: none, Ambient: none,
			},
			NoNewPrivileges: baseline.NoNewPrivileges,
			Rlimits:         rlimits,
		},
		Linux: &specs.Linux{
			Namespaces:    namespaces(in.UserNS),
			UIDMappings:   []specs.LinuxIDMapping{{ContainerID: 0, HostID: uint32(in.IDBase), Size: uint32(in.IDSize)}},
			GIDMappings:   []specs.LinuxIDMapping{{ContainerID: 0, HostID: uint32(in.IDBase), Size: uint32(in.IDSize)}},
			MaskedPaths:   masked,
			ReadonlyPaths: readonly,
			CgroupsPath:   in.CgroupsPath,
			Resources:     resources(in.Limits, in.UserSpaceKernel),
			Seccomp:       host.SeccompProfile(in.UserSpaceKernel, in.Landlock != ""),
			// System V IPC bounded: the IPC namespace's defaults are no
			// limits to speak of (baseline.SysVIPC).
			Sysctl: baseline.Sysctls(),
		},
	}
	return s, nil
}

// skeleton is a bundle's root: the mount points of the source root's
// top-level directories, its top-level symlinks, the directories cordon
// mounts over, the agent's mount point and the layout's. Only mount
// points: nothing of it is ever written once made, and every runtime
// mounts over it inside the container's own mount namespace.
type skeleton []skeletonEntry

type skeletonEntry struct {
	Path string      // relative to the root
	Mode os.FileMode // a directory's, or the empty file's
	Link string      // a symlink's target
	File bool        // an empty file
}

// make fills dir, an empty directory, with the skeleton.
func (sk skeleton) make(dir string) error {
	for _, e := range sk {
		p := filepath.Join(dir, e.Path)
		var err error
		switch {
		case e.Link != "":
			err = os.Symlink(e.Link, p)
		case e.File:
			err = os.WriteFile(p, nil, e.Mode)
		default:
			if err = os.MkdirAll(p, 0o755); err == nil {
				err = os.Chmod(p, e.Mode) // MkdirAll's mode passes the umask
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// shared returns a skeleton equal to sk under base, a host.SharedDir
// named by its content, so that containers of the same root and layout
// targets share one instead of each making some thirty mount points
// (about 1 ms a file on our machines' disks).
func (sk skeleton) shared(base string) (string, error) {
	b, err := json.Marshal(sk)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return host.SharedDir(base, "skeleton-"+hex.EncodeToString(sum[:])[:16], sk.make)
}

// writableMounts are the directories a command may write under: every
// tmpfs but /dev's and every read-write bind (/dev/shm and the device nodes
// are sandboxinit's own rules).
func writableMounts(mounts []specs.Mount) []string {
	var out []string
	for _, m := range mounts {
		switch {
		case m.Destination == "/dev" || m.Destination == "/dev/shm":
		case m.Type == "tmpfs" || m.Type == "bind" && slices.Contains(m.Options, "rw"):
			out = append(out, m.Destination)
		}
	}
	return out
}

// resources turns limits into the bundle's cgroup resources. The pids
// limit is the workload's: the agent's own threads come on top. Under a
// user-space kernel the host cgroup holds the sentry's threads, not the
// workload's tasks, so the pids limit is taskLimit's instead.
func resources(l sandbox.Limits, userSpaceKernel bool) *specs.LinuxResources {
	r := &specs.LinuxResources{}
	if l.MemoryBytes > 0 {
		m := l.MemoryBytes
		r.Memory = &specs.LinuxMemory{Limit: &m, Swap: &m}
	}
	if l.Pids > 0 && !userSpaceKernel {
		p := l.Pids + baseline.AgentPids
		r.Pids = &specs.LinuxPids{Limit: &p}
	}
	if l.CPUs > 0 {
		period := uint64(100_000)
		quota := int64(l.CPUs * float64(period))
		r.CPU = &specs.LinuxCPU{Period: &period, Quota: &quota}
	}
	return r
}

// taskLimit is RLIMIT_NPROC, counted per user of the sandbox's own user
// namespace (the agent's threads under its own user, the workload's tasks
// under theirs), hard and soft alike: without CAP_SYS_RESOURCE nothing
// inside can raise it. Without a pids limit it is the process tier's
// ceiling (baseline.DefaultTasks), so a fork bomb cannot take the host's
// pids on any tier. Under a user-space kernel without cgroups of its own
// (Debian's 2022 gVisor) it is the pids limit and oldGVisorHeadroom, which
// the sentry enforces on every task it creates, on the agent's user and
// the workload's apart: the nearest such a kernel comes to the limit (it
// counts a process under the user that made it, so each command's first
// process is the agent's, which must have room for its own threads too).
func taskLimit(in bundleInput) []specs.POSIXRlimit {
	var n uint64
	switch {
	case in.Limits.Pids <= 0:
		n = baseline.DefaultTasks
	case in.UserSpaceKernel && !in.OwnCgroups:
		n = uint64(in.Limits.Pids + oldGVisorHeadroom)
	default:
		return nil
	}
	return []specs.POSIXRlimit{{Type: "RLIMIT_NPROC", Hard: n, Soft: n}}
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// namespaces renders baseline.Namespaces.
func namespaces(userns string) []specs.LinuxNamespace {
	kinds := map[string]specs.LinuxNamespaceType{
		"user": specs.UserNamespace, "mount": specs.MountNamespace, "pid": specs.PIDNamespace,
		"network": specs.NetworkNamespace, "ipc": specs.IPCNamespace, "uts": specs.UTSNamespace,
		"cgroup": specs.CgroupNamespace,
	}
	var out []specs.LinuxNamespace
	for _, n := range baseline.Namespaces {
		ns := specs.LinuxNamespace{Type: kinds[n]}
		if ns.Type == specs.UserNamespace {
			ns.Path = userns
		}
		out = append(out, ns)
	}
	return out
}
