// Package sandboxinit is the first stage of cordon-agent on the process tier.
// The backend starts cordon-agent in fresh user, mount, PID, network, IPC,
// UTS and cgroup namespaces with the argument "sandbox-init"; this package
// builds the sandbox's filesystem view, drops every privilege, installs
// Landlock and seccomp, and then becomes the agent in the same process
// (PID 1 of the sandbox).
package sandboxinit

import (
	"github.com/cordon-sandbox/cordon/agent/startup"
	"github.com/cordon-sandbox/cordon/baseline"
)

// StartAgent starts the agent in this process, on the calling thread, with
// env and opts, as agent.Start does (cordon-agent's main passes it): it
// returns once the agent is ready, with a wait for its exit status, or a
// nil wait and the status when it could not start. The init names the
// agent only through it, so that the host, which shares this package's
// configuration types, does not link the agent's server.
type StartAgent func(env []string, opts startup.Options) (wait func() int, code int)

// Arg is the argument that selects the init stage.
const Arg = "sandbox-init"

// ConfigFD is a unix stream socket the init reads its Config from: JSON to
// the end of the stream, the detached layout mount trees (Bind.Tree)
// travelling as SCM_RIGHTS with its first bytes. The configuration comes
// when the sandbox is created, which may be long after the init started
// (a prestarted init waits on it).
const ConfigFD = 3

// ReadyFD is the write end of a pipe on which the agent, once it listens,
// writes its wire.ReadyRecord and closes: the host waits for the end of file
// there rather than polling the socket, and admits the agent from the record
// without a request. It also closes if the init fails, so the host then sees
// why at once.
const ReadyFD = 4

// ListenFD is the agent's socket, listening: the host makes it in the
// sandbox's socket directory (a Bind), as its own user, so that nothing
// inside may connect to it, and the init never needs to write there.
const ListenFD = ReadyFD + 1

// AgentID is the uid and gid the agent runs as, apart from the workload's,
// wherever the sandbox's user namespace maps it (baseline.AgentID).
const AgentID = baseline.AgentID

// MaxTrees bounds the layout trees one configuration carries.
const MaxTrees = 16

// Config is everything the init needs, sent by the host over ConfigFD.
type Config struct {
	// Stage is an empty host directory the new root is assembled on.
	Stage string `json:"stage"`
	// RootFS is the directory whose contents become the (read-only) root:
	// "/" for the host's own, with only system directories kept.
	RootFS string `json:"rootfs"`
	// HostRoot is true when RootFS is the host's own root: then only the
	// system directories are kept and secrets are masked.
	HostRoot bool `json:"hostRoot"`
	// Tmpfs are the writable, executable scratch directories: all on one
	// tmpfs of ScratchBytes (0: the kernel's default size).
	Tmpfs        []Tmpfs `json:"tmpfs"`
	ScratchBytes int64   `json:"scratchBytes,omitempty"`
	// ScratchMount is an empty host directory outside Stage on which
	// that tmpfs is mounted while its directories are bound into the
	// root (required with Tmpfs). It then leaves with the host's tree when
	// the root is entered, rather than by an unmount of its own (each
	// unmount waits for an RCU grace period: 0.1–1.3 ms here).
	ScratchMount string `json:"scratchMount,omitempty"`
	// ScratchOnDisk: ScratchMount is a file system the host mounted
	// there already (a persistent workspace's disk), which the scratch
	// directories are made on, or found on from an earlier start, in
	// place of the tmpfs.
	ScratchOnDisk bool `json:"scratchOnDisk,omitempty"`
	// Binds are host directories bound into the sandbox.
	Binds []Bind `json:"binds"`
	// UID and GID every command runs as, inside.
	UID int `json:"uid"`
	GID int `json:"gid"`
	// AgentUID, when set, is the agent's own uid and gid inside (AgentID),
	// apart from the workload's (see becomeAgent); 0 when the sandbox
	// maps only one id (started without root), and the agent runs as UID.
	AgentUID int `json:"agentUid,omitempty"`
	// Hostname inside the UTS namespace.
	Hostname string `json:"hostname"`
	// Landlock: "require" refuses to start without it, "auto" uses it when
	// the kernel has it, "off" does not.
	Landlock string `json:"landlock"`
	// Env is the agent's environment (its CORDON_AGENT_* settings, token
	// included, and what commands inherit).
	Env []string `json:"env"`
	// Workdir is where the agent starts.
	Workdir string `json:"workdir"`
	// Detached: the sandbox outlives the process that created it (no
	// parent-death signal).
	Detached bool `json:"detached,omitempty"`
	// Tasks, when above zero, caps the processes and threads of the
	// sandbox's user, the agent's included (RLIMIT_NPROC, which nothing
	// inside can raise): the guard against a fork bomb taking the host's
	// pids when the sandbox has no pids limit.
	Tasks uint64 `json:"tasks,omitempty"`
	// RootBuilder, when set, is the pid (in the init's PID namespace) of
	// the process building the root beside the init's start, a clonexec
	// helper of the init's (RootHelper): the init waits for it instead of
	// building the root itself.
	RootBuilder int `json:"rootBuilder,omitempty"`
	// PlacedTrees, when set, says the layout trees are the init's
	// descriptors from TreeFD on, placed at its start (where a
	// RootBuilder finds them), not sent with the configuration.
	PlacedTrees int `json:"placedTrees,omitempty"`
	// CommandsApart says the host holds the pids of the thread commands
	// are forked from apart from the agent's own, once the ready record
	// names it as this process's first thread: a fork bomb then cannot
	// exhaust the agent's, and the agent, which becomes the init in
	// place, makes no spare threads ahead. (An agent the init executes
	// forks from another thread, keeps its spares, and the host moves
	// nothing.)
	CommandsApart bool `json:"commandsApart,omitempty"`
	// trees are the layout trees received with the configuration.
	trees []int
}

// TreeFD is the first of the layout trees placed among the init's
// descriptors for its root's builder (Config.RootBuilder).
const TreeFD = ListenFD + 1

// Tmpfs is one scratch directory inside the sandbox.
type Tmpfs struct {
	Path  string `json:"path"`
	Mode  uint32 `json:"mode"`
	Owned bool   `json:"owned"` // owned by UID/GID rather than root
}

// Bind is one host directory bound into the sandbox.
type Bind struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"readOnly"`
	// Tree, when set, is the 1-based index among the descriptors sent with
	// the configuration of a detached mount tree (already id-mapped and
	// with its flags set by the host) that the init attaches at Target.
	Tree int `json:"tree,omitempty"`
	// File binds a single file over an existing one, read-only; when the
	// root has no file at Target it is skipped.
	File bool `json:"file,omitempty"`
	// Content, for a File bind with no Source, is the file's text: the
	// init writes it on its own root's tmpfs, so the host writes nothing.
	Content string `json:"content,omitempty"`
}

// HoldArg makes cordon-agent hold a user namespace open for the host: it
// waits until its standard input closes. The host reads the namespace's
// mapping from it to build id-mapped mounts.
const HoldArg = "userns-hold"
