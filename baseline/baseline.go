// Package baseline is cordon's security baseline as plain data: the paths,
// mounts, identities, environment, task ceilings and system-call policy
// that every sandbox gets, whatever its tier. Each tier renders it in its
// own terms (the process tier's init configuration, the OCI bundle; next a
// Docker container config, a pod spec, a microVM guest) and derives none of
// it itself, so the tiers cannot drift apart (docs/security.md).
//
// It links only the standard library and golang.org/x/net/bpf: the agent,
// which runs in every sandbox, compiles its filter from it.
package baseline

import (
	"strconv"
	"strings"
	"time"
)

// Paths every sandbox has, inside.
const (
	Workspace = "/workspace"
	Home      = "/home/sandbox"
	// SocketDir is the host's directory of the sandbox's sockets (the
	// agent's, the egress proxy's), bound in: nothing the sandbox makes
	// there lands on the host's disk.
	SocketDir    = "/run/cordon"
	AgentSocket  = SocketDir + "/agent.sock"
	EgressSocket = SocketDir + "/egress.sock"
	// LayoutRoot holds the layout's directories (sandbox.Layout).
	LayoutRoot = "/mnt/user-data"
	// AgentBinary is where a tier that binds the agent in puts it,
	// read-only.
	AgentBinary = "/.cordon/cordon-agent"
	Hostname    = "cordon"
)

// Identities inside the sandbox's user namespace.
const (
	// DefaultUID is the sandbox user's uid and gid.
	DefaultUID = 1000
	// AgentID is the agent's own uid and gid, apart from the workload's,
	// where the sandbox maps 65536 ids: the top of them, which no spec's
	// user may take (sandbox.Spec.User is at most 65534).
	AgentID = 65535
)

// Scratch is a writable, executable directory backed by memory.
type Scratch struct {
	Path string
	Mode uint32
	// Owned: the sandbox user owns it, rather than root.
	Owned bool
	// Share: a tier that mounts each apart gives it 1/Share of the
	// sandbox's writable space; the shares sum to at most one.
	Share int64
}

// ScratchDirs are the sandbox's writable directories, besides the layout's
// (every other path is read-only): half the space to the workspace, a
// quarter to /tmp, an eighth each to the home directory and /var/tmp.
var ScratchDirs = []Scratch{
	{Path: "/tmp", Mode: 0o1777, Share: 4},
	{Path: "/var/tmp", Mode: 0o1777, Share: 8},
	{Path: Workspace, Mode: 0o755, Owned: true, Share: 2},
	{Path: Home, Mode: 0o700, Owned: true, Share: 8},
}

// Size is the size of d's own tmpfs, on a tier that mounts each scratch
// directory apart, in a writable space of budget bytes: its share, and at
// least 1 MiB.
func (d Scratch) Size(budget int64) int64 { return max(budget/d.Share, 1<<20) }

// ShmBytes is the size of every sandbox's /dev/shm.
const ShmBytes = 64 << 20

// ShmOptions are the mount options of every sandbox's /dev/shm, bar the
// flags each tier spells its own way.
func ShmOptions() []string { return append([]string{"mode=1777"}, TmpfsLimits(ShmBytes)...) }

// SysVIPC are the sysctls (paths under /proc/sys, values) that bound a
// sandbox's System V IPC, whose objects outlive the processes that made
// them (until removed, or the sandbox's end): without a memory limit,
// what they hold is the host's memory, which no OOM kill frees. A new IPC
// namespace's defaults are no limit for shared memory, 32,000 message
// queues of 16 KiB (half a gigabyte), and a billion semaphores. Shared
// memory gets what /dev/shm holds (ShmBytes, in all and in one segment;
// shmall counts pages), 256 queues hold 4 MiB, and semaphores get the
// kernel's limits of old (250 a set, 32,000 in all, 32 an operation, 128
// sets).
var SysVIPC = [][2]string{
	{"kernel/shmmax", strconv.Itoa(ShmBytes)},
	{"kernel/shmall", strconv.Itoa(ShmBytes / 4096)},
	{"kernel/msgmni", "256"},
	{"kernel/sem", "250 32000 32 128"},
}

// TCPBytes bounds the kernel's TCP buffers a sandbox's sockets hold, on a
// host whose memory cgroups are v1 (where TCP memory counts against no
// limit unless one is set for it: memory.kmem.tcp.limit_in_bytes). The
// kernel's TCP memory is one pool for the whole host (net.ipv4.tcp_mem),
// which a sandbox filled with 1,000 loopback connections left unread,
// without any limit of its own, putting every TCP socket of the host
// under memory pressure. A sandbox at its bound goes on with smaller
// buffers of its own. (cgroup2 charges them to the sandbox's memory.)
const TCPBytes = 64 << 20

// Ptys is how many terminals a sandbox may hold at once: its devpts
// instance's max. Every instance but the host's own draws on one pool for
// the whole host (kernel.pty.max less kernel.pty.reserve, 3072 by
// default), which one sandbox took all of, and then no other sandbox or
// container could open a terminal.
const Ptys = 64

// DevptsOptions are a sandbox's devpts mount options.
var DevptsOptions = []string{"newinstance", "ptmxmode=0666", "mode=0620", "max=" + strconv.Itoa(Ptys)}

// Sysctls are SysVIPC as a runtime takes them ("kernel.shmmax").
func Sysctls() map[string]string {
	m := map[string]string{}
	for _, c := range SysVIPC {
		m[strings.ReplaceAll(c[0], "/", ".")] = c[1]
	}
	return m
}

// TmpfsLimits are the mount options that bound a writable tmpfs of size
// bytes: its size, and its inodes, one a page. A size bounds only the
// bytes that files hold: every inode costs the kernel about a kilobyte
// whether its file holds any or not, and the kernel's default count is
// one a page of half the host's memory whatever the size, so a 1 MiB
// tmpfs took three million empty files (3 GB of kernel memory, which no
// OOM kill frees and which a sandbox without a memory limit is not
// charged for). One inode a page is the kernel's own default ratio, so a
// tmpfs of the default size keeps the count it had.
func TmpfsLimits(size int64) []string {
	return []string{"size=" + strconv.FormatInt(size, 10), "nr_inodes=" + strconv.FormatInt(max(size/4096, 1), 10)}
}

// ScratchName is the name of scratch directory path's directory on the
// file system that holds them all ("/var/tmp": "var-tmp"): the same on
// every tier, so that a persistent workspace's disk finds its
// directories again.
func ScratchName(path string) string {
	return strings.ReplaceAll(strings.Trim(path, "/"), "/", "-")
}

// SystemDirs are the top-level directories of the host's root that a
// sandbox on the host's root sees, read-only. Everything else at the top
// (home directories, /root, /mnt, /srv, /run, unknown directories) is left
// out.
var SystemDirs = map[string]bool{
	"bin": true, "sbin": true, "lib": true, "lib32": true, "lib64": true, "libx32": true,
	"usr": true, "etc": true, "opt": true, "var": true,
}

// EmptyDirs exist in every sandbox root, empty unless a mount lands there.
var EmptyDirs = []string{"proc", "dev", "sys", "tmp", "run", "home", "root", "mnt", "media", "srv"}

// MaskedPaths hide the host's secrets under the kept system directories
// (a sandbox on the host's root): files are covered with an empty file,
// directories with an empty read-only directory.
var MaskedPaths = []string{
	"/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/sudoers", "/etc/sudoers.d",
	"/etc/ssh", "/etc/ssl/private", "/etc/docker", "/etc/containerd", "/etc/kubernetes",
	"/etc/cordon", "/var/run", "/var/lib/docker", "/var/lib/containerd", "/var/lib/kubelet",
	"/var/lib/cloud", "/var/lib/cordon", "/var/log", "/var/mail", "/var/spool", "/var/backups",
	"/var/cache/private", "/var/lib/private", "/var/lib/sudo", "/var/lib/systemd/credential.secret",
}

// ProcMasked are /proc entries no sandbox reads; ProcReadOnly are made
// read-only (as runc does), as is sysrq-trigger where it is not masked.
var (
	ProcMasked = []string{"kcore", "keys", "key-users", "timer_list", "timer_stats", "sched_debug",
		"latency_stats", "acpi", "asound", "scsi", "interrupts", "kallsyms", "kpagecount", "kpageflags",
		"kpagecgroup", "sysrq-trigger", "config.gz", "vmallocinfo", "slabinfo", "pagetypeinfo", "zoneinfo",
		"buddyinfo", "cmdline", "iomem", "ioports", "diskstats", "partitions"}
	ProcReadOnly = []string{"bus", "fs", "irq", "sys"}
)

// Devices are the only device nodes a sandbox has (in its own /dev).
var Devices = []string{"null", "zero", "full", "random", "urandom", "tty"}

// Namespaces a sandbox has of its own, on every tier that shares the
// host's kernel: all of them but time.
var Namespaces = []string{"user", "mount", "pid", "network", "ipc", "uts", "cgroup"}

// AgentCapabilities are all an agent that a runtime starts as the
// sandbox's root keeps, to take its own identity apart from the
// workload's; its commands get none (their bounding set is emptied).
var AgentCapabilities = []string{"CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_CHOWN"}

// NoNewPrivileges holds on every tier: nothing in a sandbox gains a
// privilege by executing a file.
const NoNewPrivileges = true

// Task ceilings.
const (
	// ReserveThreads is how many spare OS threads the agent makes at
	// start, where a pids limit could leave it none (see
	// agent.Config.SpareThreads); MaxSpareThreads bounds a request for
	// more.
	ReserveThreads  = 16
	MaxSpareThreads = 256
	// AgentPids is what a pids limit grows by for the agent itself: its
	// spare threads and the Go runtime's own.
	AgentPids = ReserveThreads + 32
	// DefaultTasks is the ceiling on a sandbox's processes and threads,
	// its agent's included, when its spec sets no pids limit:
	// RLIMIT_NPROC of the sandbox's user, which nothing inside can raise.
	// It keeps a fork bomb from taking every pid of the host (32768 on
	// many), with room for any ordinary workload.
	DefaultTasks = 4096
)

// DefaultTimeout is a command's timeout when its request names none.
const DefaultTimeout = 5 * time.Minute

// EnvPrefix marks every variable the agent reads its own configuration
// from. The agent strips every variable with this prefix from the
// environment it gives commands, so a new setting never reaches untrusted
// code by accident.
const EnvPrefix = "CORDON_AGENT_"

// UserName is the sandbox user's name for uid.
func UserName(uid int) string {
	if uid == 0 {
		return "root"
	}
	return "sandbox"
}

// CommandEnv is the environment every command starts from (a spec's Env
// and a request's env come on top).
func CommandEnv(uid int) map[string]string {
	user := UserName(uid)
	return map[string]string{
		"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME": Home, "USER": user, "LOGNAME": user, "LANG": "C.UTF-8", "TERM": "xterm-256color",
	}
}

// IdentityFiles are the small files, by path, that say who and where the
// sandbox is, so that nothing of the host's shows through: hosts, hostname,
// and a resolver configuration naming no reachable resolver (names resolve
// at the egress proxy; a lookup inside fails at once); and on the host's
// own root, whose /etc would name the host's accounts, its users and
// groups.
func IdentityFiles(uid int, hostRoot bool) map[string]string {
	files := map[string]string{
		"/etc/hosts":       "127.0.0.1\tlocalhost " + Hostname + "\n::1\tlocalhost ip6-localhost ip6-loopback\n",
		"/etc/hostname":    Hostname + "\n",
		"/etc/resolv.conf": "# cordon: no resolver is reachable from a sandbox; names resolve at the egress proxy.\nnameserver 127.0.0.1\noptions timeout:1 attempts:1\n",
	}
	if hostRoot {
		passwd := "root:x:0:0:root:/root:/bin/sh\n"
		group := "root:x:0:\n"
		if uid != 0 {
			passwd += "sandbox:x:" + strconv.Itoa(uid) + ":" + strconv.Itoa(uid) + ":sandbox:" + Home + ":/bin/sh\n"
			group += "sandbox:x:" + strconv.Itoa(uid) + ":\n"
		}
		files["/etc/passwd"] = passwd + "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
		files["/etc/group"] = group + "nogroup:x:65534:\n"
	}
	return files
}

// MergeAccounts is an image's own /etc/passwd and /etc/group with the
// sandbox user added (uid, named UserName(uid), at home in Home) in place
// of any account of that uid or name, and nobody where the image has
// none: the accounts of a sandbox whose root is an image.
func MergeAccounts(passwd, group string, uid int) (string, string) {
	user := UserName(uid)
	id := strconv.Itoa(uid)
	keep := func(text string, mine, nobody string) string {
		var out []string
		hasNobody := false
		for _, line := range strings.Split(text, "\n") {
			f := strings.Split(line, ":")
			if len(f) < 3 || strings.HasPrefix(line, "#") {
				continue
			}
			if f[0] == user || f[2] == id {
				continue
			}
			hasNobody = hasNobody || f[2] == "65534"
			out = append(out, line)
		}
		out = append(out, mine)
		if !hasNobody && uid != 65534 {
			out = append(out, nobody)
		}
		return strings.Join(out, "\n") + "\n"
	}
	home := Home
	if uid == 0 {
		home = "/root"
	}
	return keep(passwd, user+":x:"+id+":"+id+":"+user+":"+home+":/bin/sh", "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin"),
		keep(group, user+":x:"+id+":", "nogroup:x:65534:")
}
