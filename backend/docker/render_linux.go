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
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
)

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
	Identity []mount.Mount
	Limits   sandbox.Limits
	// Budget is the writable space when the limits set none.
	Budget int64
	// Landlock is the agent's Landlock mode ("", "auto", "require").
	Landlock string
	Labels   map[string]string
}

// render is the security baseline as a Docker container: each setting
// says why it is there, and TestRender pins the whole of it, so that a
// change is deliberate.
func render(in renderInput) (*container.Config, *container.HostConfig, error) {
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
			opts = append(opts, fmt.Sprintf("size=%d", max(budget/d.Share, 1<<20)))
		}
		tmpfs[d.Path] = strings.Join(opts, ",")
		writable = append(writable, d.Path)
	}
	if in.Landlock != "" {
		env = append(env, baseline.EnvPrefix+"LANDLOCK="+in.Landlock,
			baseline.EnvPrefix+"WRITABLE="+strings.Join(slices.Sorted(slices.Values(writable)), ":"))
	}
	seccomp, err := json.Marshal(host.SeccompProfile(false, in.Landlock != ""))
	if err != nil {
		return nil, nil, err
	}
	mounts := []mount.Mount{
		// The agent is the entrypoint, from the host, read-only.
		{Type: mount.TypeBind, Source: in.AgentPath, Target: baseline.AgentBinary, ReadOnly: true},
		// The agent's socket and the egress proxy's: the only ways in and
		// out. Nothing there executes.
		{Type: mount.TypeBind, Source: in.SocketDir, Target: baseline.SocketDir, BindOptions: &mount.BindOptions{Propagation: mount.PropagationPrivate}},
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
	cfg := &container.Config{
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
	hc := &container.HostConfig{
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
		// Its own IPC, cgroup, pid and UTS namespaces.
		IpcMode:      container.IPCModePrivate,
		CgroupnsMode: container.CgroupnsModePrivate,
		PidMode:      "",
		UTSMode:      "",
		// The image is read-only; the writable paths are the tmpfs below.
		ReadonlyRootfs: true,
		Tmpfs:          tmpfs,
		Mounts:         mounts,
		// /proc as the other tiers have it.
		MaskedPaths:   masked,
		ReadonlyPaths: readonly,
		// No published ports, no restart: a sandbox that ends is gone.
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
		// The agent's own log, bounded.
		LogConfig: container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "1m", "max-file": "1"}},
		Resources: container.Resources{PidsLimit: &pids},
	}
	if in.Limits.MemoryBytes > 0 {
		// Memory including swap, as on the other tiers.
		hc.Resources.Memory = in.Limits.MemoryBytes
		hc.Resources.MemorySwap = in.Limits.MemoryBytes
	}
	if in.Limits.CPUs > 0 {
		hc.Resources.NanoCPUs = int64(in.Limits.CPUs * 1e9)
	}
	return cfg, hc, nil
}
