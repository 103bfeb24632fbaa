package sandbox

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/egress"
	"github.com/cordon-sandbox/cordon/internal/disk"
	"os"
)

// Spec describes the sandbox to create.
type Spec struct {
	// Tier names the backend; empty means the provider's default.
	Tier string
	// Env is the environment every command inherits (per-command Env is
	// applied on top).
	Env map[string]string
	// Workspace is a host directory to use as the workspace, where the tier
	// supports one; empty means a fresh, private one removed at Destroy.
	Workspace string
	// Limits the tier must enforce; a zero field means no limit.
	Limits Limits
	// MaxTimeout is the longest timeout a command may ask for; zero means the
	// agent's default (30 minutes).
	MaxTimeout time.Duration
	// IdleTimeout makes the agent exit after this long without work; zero
	// disables it.
	IdleTimeout time.Duration
	// RootFS is a directory to use as the read-only root filesystem; empty
	// means the tier's default (on the process tier, the host's system
	// directories with secrets masked). Named by its real path, as a
	// Layout directory is.
	RootFS string
	// Image names an OCI image (a cached name or digest, or a registry
	// reference, pulled when not cached) whose root filesystem the sandbox
	// uses; it excludes RootFS.
	Image string
	// User is the uid (and gid) commands run as inside; nil means the
	// tier's default sandbox user (1000).
	User *int
	// RequireLandlock refuses to create the sandbox unless Landlock backs
	// the mount table (tiers that use it apply it whenever they can).
	RequireLandlock bool
	// Layout binds host directories at fixed paths inside (see Layout).
	Layout Layout
	// RuntimeClass names the platform's runtime for this sandbox (a
	// Kubernetes RuntimeClass: gvisor, kata), over its tier's default; a
	// tier without one refuses it.
	RuntimeClass string
	// PersistentWorkspace keeps the workspace on storage of its own that
	// outlives the sandbox's processes, so that the sandbox can be
	// suspended (everything it runs stopped, its compute given back) and
	// resumed on the same workspace (Sandbox.Suspend); a tier that cannot
	// refuses it.
	PersistentWorkspace bool
	// Egress is what the sandbox may reach. Nil is the tier's default:
	// deny-all wherever the tier has an egress boundary (passthrough has
	// none: it is a host process on the host's network).
	Egress *egress.Policy
}

// Layout names host directories to bind into the sandbox, each at a fixed
// path under /mnt/user-data: outputs and scratch read-write, the others
// read-only. They join the agent's write and read roots accordingly. Each
// is named by its real path: the tiers refuse one with a symbolic link on
// its way, at every start of the sandbox, so that a link placed there
// since (a sandbox may write one into a directory it shares) cannot lead
// to another directory of the host.
type Layout struct {
	Outputs     string
	Uploads     string
	Scratch     string
	ToolResults string
	Transcripts string
	Skills      string
	// Owner, when set, is the host user and group the sandbox writes the
	// read-write directories as (what it creates there belongs to them);
	// nil means each directory's own owner. A sandbox never writes on the
	// host as root: a read-write directory that root owns is refused
	// unless Owner names someone else, and Owner may not be root.
	Owner *HostOwner
}

// HostOwner is a host user and group.
type HostOwner struct{ UID, GID int }

// IsZero reports whether no layout directory is given.
func (l Layout) IsZero() bool { l.Owner = nil; return l == Layout{} }

// Limits are per-sandbox resource limits.
type Limits struct {
	MemoryBytes int64   // memory, including swap
	Pids        int64   // the workload's processes and threads (a tier adds its agent's own)
	CPUs        float64 // CPU bandwidth in cores
	// DiskBytes bounds the writable space (the workspace, /tmp, /var/tmp
	// and the home directory together): a full one is ENOSPC for the
	// workload. It is memory (tmpfs), charged to the sandbox's memory
	// limit: with one it may be at most that limit, and it is half of it
	// when not given (Disk). A persistent workspace's writable space is a
	// disk instead (WithDisks), of DiskBytes or the provider's default.
	DiskBytes int64
}

// Disk is the writable space l bounds: DiskBytes, or half of MemoryBytes
// when only that is given (so that filling the space leaves the
// workload's processes half their memory, and ends in ENOSPC rather than
// an OOM kill), or 0 (the tier's default) when neither is.
func (l Limits) Disk() int64 {
	if l.DiskBytes > 0 {
		return l.DiskBytes
	}
	return l.MemoryBytes / 2
}

// IsZero reports whether no limit is asked for.
func (l Limits) IsZero() bool { return l == Limits{} }

// Validate checks the spec's own consistency (not what a tier supports).
func (s *Spec) Validate() error {
	if s.Limits.MemoryBytes < 0 || s.Limits.Pids < 0 || s.Limits.CPUs < 0 || s.Limits.DiskBytes < 0 {
		return fmt.Errorf("%w: limits must not be negative", ErrInvalidSpec)
	}
	l := s.Limits
	switch {
	case l.MemoryBytes != 0 && (l.MemoryBytes < MinMemory || l.MemoryBytes > maxBytes):
		return fmt.Errorf("%w: limits.memoryBytes (--memory) %d: want 0 (none) or %d (32 MiB) to %d", ErrInvalidSpec, l.MemoryBytes, MinMemory, int64(maxBytes))
	case l.DiskBytes != 0 && (l.DiskBytes < minDisk || l.DiskBytes > maxBytes):
		return fmt.Errorf("%w: limits.diskBytes (--disk) %d: want 0 (the default) or %d (1 MiB) to %d", ErrInvalidSpec, l.DiskBytes, minDisk, int64(maxBytes))
	case l.Pids != 0 && (l.Pids < MinPids || l.Pids > maxPids):
		return fmt.Errorf("%w: limits.pids (--pids) %d: want 0 (none) or %d to %d", ErrInvalidSpec, l.Pids, MinPids, maxPids)
	case l.CPUs != 0 && !(l.CPUs >= minCPUs && l.CPUs <= maxCPUs): // (NaN fails both)
		return fmt.Errorf("%w: limits.cpus (--cpus) %v: want 0 (none) or %v to %v", ErrInvalidSpec, l.CPUs, minCPUs, maxCPUs)
	}
	if s.Limits.MemoryBytes > 0 && s.Limits.DiskBytes > s.Limits.MemoryBytes && !s.PersistentWorkspace {
		return fmt.Errorf("%w: limits.diskBytes %d is above limits.memoryBytes %d: the writable space is memory, and one fuller than the memory limit would end in an OOM kill, not ENOSPC; give at most the memory limit", ErrInvalidSpec, s.Limits.DiskBytes, s.Limits.MemoryBytes)
	}
	if s.PersistentWorkspace && l.DiskBytes != 0 && l.DiskBytes < disk.MinBytes {
		return fmt.Errorf("%w: limits.diskBytes (--disk) %d: a persistent workspace's disk is at least %d (16 MiB)", ErrInvalidSpec, l.DiskBytes, disk.MinBytes)
	}
	if s.Image != "" && s.RootFS != "" {
		return fmt.Errorf("%w: give an image or a root filesystem directory, not both", ErrInvalidSpec)
	}
	if s.User != nil && (*s.User < 0 || *s.User > 65534) {
		return fmt.Errorf("%w: user %d is not a uid in 0-65534", ErrInvalidSpec, *s.User)
	}
	if o := s.Layout.Owner; o != nil && (o.UID <= 0 || o.GID <= 0 || o.UID > maxHostID || o.GID > maxHostID) {
		return fmt.Errorf("%w: layout owner %d:%d: want an unprivileged host user and group, each 1-%d", ErrInvalidSpec, o.UID, o.GID, maxHostID)
	}
	if s.MaxTimeout < 0 || s.IdleTimeout < 0 {
		return fmt.Errorf("%w: timeouts must not be negative", ErrInvalidSpec)
	}
	for k, v := range s.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return fmt.Errorf("%w: environment variable name %q", ErrInvalidSpec, k)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return fmt.Errorf("%w: environment variable %s: its value holds a NUL byte, which no environment can carry", ErrInvalidSpec, k)
		}
		if strings.HasPrefix(k, "CORDON_AGENT_") {
			return fmt.Errorf("%w: %q: the CORDON_AGENT_ prefix is reserved for the agent's own settings", ErrInvalidSpec, k)
		}
	}
	return nil
}

// The ranges a limit must lie in (Validate). A memory limit below
// MinMemory leaves the agent no room to start; a pids limit below MinPids
// none for a shell pipeline.
const (
	MinMemory = 32 << 20
	minDisk   = 1 << 20
	maxBytes  = 1 << 44 // 16 TiB
	MinPids   = 8
	maxPids   = 1 << 22 // the kernel's own most
	minCPUs   = 0.01
	maxCPUs   = 1024
)

// maxHostID is the largest host uid or gid (2^32-2; -1 means none).
const maxHostID = 1<<32 - 2

// Capabilities is what a backend can enforce. Create checks a spec against
// it before anything starts.
type Capabilities struct {
	// Isolated is false only for passthrough: commands run as host processes.
	Isolated bool
	// Limits the backend can enforce.
	MemoryLimit, PidsLimit, CPULimit, DiskLimit bool
	// OwnMemory: a sandbox's memory is a machine's of its own (a VM's),
	// with or without a limit, and so is its writable space: the host's
	// memory is not at stake (WithDefaultLimits leaves the space alone).
	OwnMemory bool
	// HostWorkspace: the backend can use a caller-given host directory.
	HostWorkspace bool
	// Landlock: the backend applies Landlock under its mount table.
	Landlock bool
	// RootFS: the backend can use a caller-given root filesystem.
	RootFS bool
	// EngineImages: Spec.Image names an image in the backend's own engine
	// (Docker's store, pulled there when missing), which the backend
	// resolves itself; the provider's image cache is not used.
	EngineImages bool
	// User: the backend can run commands as a caller-chosen uid.
	User bool
	// Layout: the backend can bind layout directories.
	Layout bool
	// RuntimeClass: the backend runs each sandbox under a runtime of the
	// platform's that Spec.RuntimeClass names.
	RuntimeClass bool
	// PersistentWorkspace: the backend keeps a workspace that outlives
	// the sandbox's processes, and its instances implement Suspender.
	PersistentWorkspace bool
	// Disk: the backend starts an instance on Launch.Disk, the sandbox's
	// writable space kept by the provider (WithDisks), which then offers
	// persistent workspaces on this tier.
	Disk bool
	// Egress: instances implement EgressPort (the egress proxy is their
	// way out) or EgressEnforcer (the platform enforces the policy), so
	// the egress boundary can be enforced.
	Egress bool
}

// Check refuses a spec that asks for something these capabilities lack.
func (c Capabilities) Check(tier string, s *Spec) error {
	switch {
	case s.Limits.MemoryBytes > 0 && !c.MemoryLimit:
		return &UnsupportedError{Tier: tier, What: "a memory limit"}
	case s.Limits.Pids > 0 && !c.PidsLimit:
		return &UnsupportedError{Tier: tier, What: "a pids limit"}
	case s.Limits.CPUs > 0 && !c.CPULimit:
		return &UnsupportedError{Tier: tier, What: "a CPU limit"}
	case s.Limits.DiskBytes > 0 && !c.DiskLimit:
		return &UnsupportedError{Tier: tier, What: "a limit on the writable space"}
	case s.Workspace != "" && !c.HostWorkspace:
		return &UnsupportedError{Tier: tier, What: "a host workspace directory (bind a host directory at /mnt/user-data/outputs with --mount outputs=DIR, Layout.Outputs, instead)"}
	case s.RequireLandlock && !c.Landlock:
		return &UnsupportedError{Tier: tier, What: "Landlock"}
	case s.RootFS != "" && !c.RootFS:
		return &UnsupportedError{Tier: tier, What: "a root filesystem directory"}
	case s.Image != "" && !c.RootFS && !c.EngineImages:
		return &UnsupportedError{Tier: tier, What: "an image"}
	case s.User != nil && !c.User:
		return &UnsupportedError{Tier: tier, What: "a chosen user"}
	case s.RuntimeClass != "" && !c.RuntimeClass:
		return &UnsupportedError{Tier: tier, What: "a runtime class (the kubernetes tier's RuntimeClass)"}
	case s.PersistentWorkspace && !c.PersistentWorkspace:
		return &UnsupportedError{Tier: tier, What: "a persistent workspace (one that outlives its sandbox's processes, to suspend and resume on)"}
	case !s.Layout.IsZero() && !c.Layout:
		return &UnsupportedError{Tier: tier, What: "layout directories"}
	case s.Egress != nil && !c.Egress:
		return &UnsupportedError{Tier: tier, What: "an egress policy (it has no network boundary)"}
	}
	return nil
}

// Launch is what the provider hands a backend: the spec, and the agent's
// settings (the per-instance token among them) to pass into the sandbox's
// agent environment only, never argv or disk.
type Launch struct {
	Spec  Spec
	Token string
	// AgentEnv holds CORDON_AGENT_* settings beyond the token, socket and
	// workspace, which the backend chooses.
	AgentEnv map[string]string
	// Disk, for a backend with Capabilities.Disk, is an ext4 image file:
	// the sandbox's writable space (workspace, home directory, /tmp and
	// /var/tmp) lives on it, not in memory, mounted nosuid and nodev. It
	// outlives the instance; the instance mounts it at Start and lets it
	// go at Destroy.
	Disk string
}

// Backend starts isolated environments that run cordon-agent. Exec, files
// and terminals come from the agent, so they behave the same on every tier.
type Backend interface {
	// Name is the tier name, e.g. "passthrough" or "process".
	Name() string
	// Capabilities reports what the backend can enforce.
	Capabilities() Capabilities
	// Probe checks the host prerequisites; an error wraps ErrUnavailable.
	Probe(ctx context.Context) error
	// Start brings up one environment with its agent starting, and returns
	// how to reach it. It need not wait for the agent to be ready. A failed
	// Start leaves nothing behind.
	Start(ctx context.Context, l Launch) (Instance, error)
}

// EgressPort is implemented by instances whose sandbox's only way out is a
// listener on the host, which the provider serves with the egress proxy.
type EgressPort interface {
	EgressListener() net.Listener
}

// EgressEnforcer is implemented by instances whose egress boundary is
// their platform's own rather than the egress proxy (a cluster's network
// policy, written by the backend at Start from Spec.Egress): SetEgress
// replaces the policy and returns once it is in force as far as the
// platform reports.
type EgressEnforcer interface {
	SetEgress(ctx context.Context, p egress.Policy) error
}

// Suspender is implemented by instances that can stop all their sandbox
// runs and give its compute back, keeping its persistent workspace, and
// later start again on that workspace (Spec.PersistentWorkspace): after
// Wake, Endpoint reaches the new instance of the agent (a new boot
// identity, the same token). Exited does not close for a suspension.
type Suspender interface {
	Suspend(ctx context.Context) error
	Wake(ctx context.Context) error
}

// Pauser is implemented by instances that can stop every process of the
// sandbox in place and resume it later (the process tier's cgroup freezer).
// CanPause may be false for an instance whose host lacks the primitive.
type Pauser interface {
	CanPause() bool
	Pause(ctx context.Context) error
	Resume(ctx context.Context) error
}

// Persistent is implemented by instances that can outlive the process that
// started them (a daemon restarting): State describes the instance for the
// backend's Adopt. It holds no secret.
type Persistent interface {
	State() ([]byte, error)
}

// DiskFreezer is implemented by instances on a disk (Launch.Disk) that
// hold its file system where this host cannot freeze it (a VM's guest
// mounts it): FreezeDisk has its writes flushed and held until thaw, for a
// copy-on-write copy of the disk (Provider.CloneDisks). The instance holds
// the bound: a freeze is let go after a while even if thaw never comes.
type DiskFreezer interface {
	FreezeDisk(ctx context.Context) (thaw func() error, err error)
}

// Adopter is implemented by backends whose instances can be taken over by
// a later process.
type Adopter interface {
	// Adopt takes over the instance state describes, reached with token.
	// An instance that is gone is an error wrapping ErrAgent; what it left
	// on the host is Sweep's to remove.
	Adopt(ctx context.Context, state []byte, token string) (Instance, error)
	// Sweep tears down, with confirmation, every instance of this backend
	// that keep does not hold, and whatever dead instances left behind.
	Sweep(ctx context.Context, keep []Instance) error
}

// The optional abilities below are each an interface of their own, which a
// tier implements or not (and asserts with var _ I = (*T)(nil)); callers
// check for them, and a tier that lacks one refuses what needs it. The
// abilities to come (terminals, snapshots) will be declared here too.

// Signaller is implemented by instances whose agent process the host can
// signal itself (the process and passthrough tiers start it as a child;
// an OCI runtime's container init is reached only through the runtime).
type Signaller interface {
	Signal(sig os.Signal) error
}

// ExitCoder is implemented by instances that can tell their agent's exit
// status once Exited has closed: -1 where it is unknown (a sandbox this
// process adopted rather than started).
type ExitCoder interface {
	ExitCode() int
}

// Discarder is implemented by instances that can be torn down at once,
// without first asking their agent to stop what it runs and sync what was
// written: for a sandbox whose work is over (Sandbox.Discard). Nothing
// written is lost either way (it is in the kernel's page cache); only the
// programs still running lose their chance to act on SIGTERM.
type Discarder interface {
	Discard(ctx context.Context) error
}

// Closer is implemented by backends that hold resources of their own (a
// pool of started inits, a helper process) until they are closed.
type Closer interface {
	Close() error
}

// Instance is one running environment.
type Instance interface {
	// Endpoint says how to reach the agent (token included).
	Endpoint() client.Endpoint
	// Exited is closed when the environment's agent has exited.
	Exited() <-chan struct{}
	// Diagnostics returns what the environment said about itself (the
	// agent's own log), for error messages.
	Diagnostics() string
	// Destroy tears the environment down and returns only once that is
	// confirmed; an error wraps ErrTeardown and Destroy may be retried.
	Destroy(ctx context.Context) error
}
