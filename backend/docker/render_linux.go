package docker

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/cordon-sandbox/cordon/agent/sandboxinit"
	"github.com/cordon-sandbox/cordon/backend/host"
	"github.com/cordon-sandbox/cordon/baseline"
	"github.com/cordon-sandbox/cordon/sandbox"
)

// createRequest is the body of the Engine API's container create: the
// container's configuration with its host configuration, in the API's own
// field names (only those cordon sets).
type createRequest struct {
	Hostname        string
	User            string
	AttachStdin     bool
	OpenStdin       bool
	StdinOnce       bool
	Env             []string
	Cmd             []string
	Image           string
	WorkingDir      string
	Entrypoint      []string
	NetworkDisabled bool
	Labels          map[string]string
	HostConfig      hostConfig
}

type hostConfig struct {
	NetworkMode    string
	CapAdd         []string
	CapDrop        []string
	SecurityOpt    []string
	IpcMode        string
	Sysctls        map[string]string
	CgroupnsMode   string
	CgroupParent   string `json:",omitempty"`
	ReadonlyRootfs bool
	Tmpfs          map[string]string
	Mounts         []bindMount
	MaskedPaths    []string
	ReadonlyPaths  []string
	RestartPolicy  struct{ Name string }
	LogConfig      logConfig
	PidsLimit      *int64
	Memory         int64 `json:",omitempty"`
	MemorySwap     int64 `json:",omitempty"`
	NanoCpus       int64 `json:",omitempty"`
}

type logConfig struct {
	Type   string
	Config map[string]string
}

// bindMount is a bind of a host path (the API's Mount of Type "bind").
type bindMount struct {
	Type        string
	Source      string
	Target      string
	ReadOnly    bool         `json:",omitempty"`
	BindOptions *bindOptions `json:",omitempty"`
}

type bindOptions struct{ Propagation string }

// bind binds source at target.
func bind(source, target string, readOnly bool) bindMount {
	return bindMount{Type: "bind", Source: source, Target: target, ReadOnly: readOnly}
}

// renderInput is what one sandbox's container is made from.
type renderInput struct {
	Image string
	UID   int
	// Env is the agent's environment (host.AgentEnv).
	Env []string
	// AgentPath is the host's copy of the agent, SocketDir the host
	// directory of the sandbox's sockets.
	AgentPath, SocketDir string
	// Identity are the identity files to bind (host.IdentityFiles).
	Identity []bindMount
	Limits   sandbox.Limits
	// Budget is the writable space when the limits set none.
	Budget int64
	// Landlock is the agent's Landlock mode ("", "auto", "require").
	Landlock string
	// CommandsApart: the host holds the workload's pids in a cgroup of
	// their own (holdCommands), so the agent keeps no spare threads.
	CommandsApart bool
	// CgroupParent is the cgroup the container's are made below ("": the
	// engine's own default).
	CgroupParent string
	Labels       map[string]string
}

// render is the security baseline as a Docker container: each setting
// says why it is there, and TestRender pins the whole of it, so that a
// change is deliberate.
func render(in renderInput) (*createRequest, error) {
	env := slices.Clone(in.Env)
	tmpfs := map[string]string{}
	var writable []string
	budget := in.Limits.Disk()
	if budget == 0 {
		budget = in.Budget
	}
	for _, d := range baseline.ScratchDirs {
		// The writable paths are memory, executable (a workspace runs what
		// it builds), without set-id or device files, within the space.
		opts := []string{"rw", "exec", "nosuid", "nodev", fmt.Sprintf("mode=%o", d.Mode)}
		if d.Owned {
			opts = append(opts, fmt.Sprintf("uid=%d", in.UID), fmt.Sprintf("gid=%d", in.UID))
		}
		if budget > 0 {
			opts = append(opts, baseline.TmpfsLimits(d.Size(budget))...)
		}
		tmpfs[d.Path] = strings.Join(opts, ",")
		writable = append(writable, d.Path)
	}
	// /dev/shm as the other tiers have it: Docker's own (--shm-size) has
	// a size, but the kernel's default count of inodes.
	tmpfs["/dev/shm"] = strings.Join(append([]string{"rw", "exec", "nosuid", "nodev"}, baseline.ShmOptions()...), ",")
	if in.Landlock != "" {
		env = append(env, baseline.EnvPrefix+"LANDLOCK="+in.Landlock,
			baseline.EnvPrefix+"WRITABLE="+strings.Join(slices.Sorted(slices.Values(writable)), ":"))
	}
	seccomp, err := json.Marshal(host.SeccompProfile(false, in.Landlock != ""))
	if err != nil {
		return nil, err
	}
	mounts := []bindMount{
		// The agent is the entrypoint, from the host, read-only.
		bind(in.AgentPath, baseline.AgentBinary, true),
		// The agent's socket and the egress proxy's: the only ways in and
		// out.
		{Type: "bind", Source: in.SocketDir, Target: baseline.SocketDir, BindOptions: &bindOptions{Propagation: "private"}},
	}
	mounts = append(mounts, in.Identity...)
	var masked []string
	for _, p := range baseline.ProcMasked {
		masked = append(masked, "/proc/"+p)
	}
	var readonly []string
	for _, p := range baseline.ProcReadOnly {
		readonly = append(readonly, "/proc/"+p)
	}
	pids := int64(baseline.DefaultTasks)
	if in.Limits.Pids > 0 {
		// The workload's limit, and the agent's own threads.
		pids = in.Limits.Pids + baseline.AgentPids
	}
	// The agent starts as the container's root with the four capabilities
	// it needs to take an identity apart from the workload's (its own ids,
	// its socket made its own, the bounding set of the thread commands
	// fork from emptied), and drops them all before it serves: otherwise
	// the workload, as its user, could signal and trace it. Commands run as
	// the sandbox user with no capability at all.
	env = append(env, sandboxinit.EnvWorkload+"="+fmt.Sprintf("%d:%d", in.UID, in.UID))
	if in.CommandsApart {
		env = append(env, baseline.EnvPrefix+"SPARE_THREADS=0")
	}
	req := &createRequest{
		Image:      in.Image,
		User:       "0:0",
		Entrypoint: []string{baseline.AgentBinary},
		Cmd:        []string{},
		Env:        env,
		WorkingDir: baseline.Workspace,
		Hostname:   baseline.Hostname,
		Labels:     maps.Clone(in.Labels),
		// No network at all: the egress socket is the way out.
		NetworkDisabled: true,
		// Standard input carries the agent's token (never in the config),
		// then stays open as its lifeline where the sandbox is not
		// detached.
		OpenStdin: true, StdinOnce: true, AttachStdin: true,
	}
	req.HostConfig = hostConfig{
		NetworkMode: "none",
		// None of Docker's default capabilities; the agent's four alone,
		// which it drops (above).
		CapDrop: []string{"ALL"},
		CapAdd:  slices.Clone(baseline.AgentCapabilities),
		SecurityOpt: []string{
			// Nothing gains a privilege by executing a file.
			"no-new-privileges=true",
			// The baseline's default-deny system-call policy, the same
			// profile the OCI tiers give their runtime.
			"seccomp=" + string(seccomp),
		},
		// Its own IPC and cgroup namespaces (pid, UTS and mount ones are
		// every container's).
		IpcMode: "private",
		// Its System V IPC bounded (the IPC namespace's defaults are no
		// limits to speak of: baseline.SysVIPC).
		Sysctls:      baseline.Sysctls(),
		CgroupnsMode: "private",
		// Below the cgroup whose bounds hold all of the container tiers'
		// sandboxes together (host.BoundContainers), where the engine
		// manages cgroups itself.
		CgroupParent: in.CgroupParent,
		// The image is read-only; the writable paths are the tmpfs below.
		ReadonlyRootfs: true,
		Tmpfs:          tmpfs,
		Mounts:         mounts,
		// /proc as the other tiers have it.
		MaskedPaths:   masked,
		ReadonlyPaths: readonly,
		// No published ports, no restart: a sandbox that ends is gone.
		RestartPolicy: struct{ Name string }{"no"},
		// The agent's own log, bounded.
		LogConfig: logConfig{Type: "json-file", Config: map[string]string{"max-size": "1m", "max-file": "1"}},
		PidsLimit: &pids,
	}
	if in.Limits.MemoryBytes > 0 {
		// Memory including swap, as on the other tiers.
		req.HostConfig.Memory = in.Limits.MemoryBytes
		req.HostConfig.MemorySwap = in.Limits.MemoryBytes
	}
	if in.Limits.CPUs > 0 {
		req.HostConfig.NanoCpus = int64(in.Limits.CPUs * 1e9)
	}
	return req, nil
}
