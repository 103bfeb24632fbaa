package kubernetes

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/cordon-sandbox/cordon/baseline"
	"github.com/cordon-sandbox/cordon/egress"
	"github.com/cordon-sandbox/cordon/sandbox"
)

// renderInput is what one sandbox's pod is made from.
type renderInput struct {
	Name, Image, AgentImage string
	// AgentInImage is the agent's path in Image, where it holds one
	// (Config.AgentInImage): then no init container copies it in.
	AgentInImage string
	UID          int
	// Env is the agent's environment (host.AgentEnv), without its token.
	Env          []string
	Limits       sandbox.Limits
	RuntimeClass string
	// Landlock is the agent's Landlock mode ("auto", "require").
	Landlock string
	// GVisor: the runtime class is gVisor's (Config.GVisorClasses).
	GVisor bool
	// Secret names the Secret holding the agent's token.
	Secret string
	// Claim, when set, is the persistent workspace's claim, mounted at
	// the workspace in place of memory.
	Claim  string
	Labels map[string]string
}

// In the pod: where the agent is copied to, where its token is mounted.
const (
	agentDir  = "/.cordon"
	tokenDir  = "/run/cordon-token"
	tokenKey  = "token"
	agentName = "sandbox"
)

// defaultScratch is the writable space of a sandbox whose limits set none.
const defaultScratch = 1 << 30

// render is the security baseline as a pod: each setting says why it is
// there, and TestRender pins the whole of it, so that a change is
// deliberate.
func render(in renderInput) *pod {
	yes, no := true, false
	root := int64(0)
	grace := int64(2)
	budget := in.Limits.Disk()
	if budget == 0 {
		budget = defaultScratch
	}
	env := slices.Clone(in.Env)
	var writable []string
	volumes := []volume{
		// The token, readable by the sandbox's root alone: the agent reads
		// it before it takes its own identity; the workload never can.
		{Name: "token", Secret: &secretVolume{SecretName: in.Secret, DefaultMode: ptr(0o400)}},
	}
	mounts := []volumeMount{{Name: "token", MountPath: tokenDir, ReadOnly: true}}
	agentPath := in.AgentInImage
	var inits []container
	if agentPath == "" {
		agentPath = agentDir + "/cordon-agent"
		volumes = append(volumes,
			// The agent, copied in by the first init container: memory,
			// read-only where the sandbox sees it.
			volume{Name: "agent", EmptyDir: &emptyDir{Medium: "Memory", SizeLimit: "64Mi"}},
			// The image's accounts with the sandbox user's, written by the
			// second.
			volume{Name: "accounts", EmptyDir: &emptyDir{Medium: "Memory", SizeLimit: "4Mi"}})
		mounts = append(mounts,
			volumeMount{Name: "agent", MountPath: agentDir, ReadOnly: true},
			volumeMount{Name: "accounts", MountPath: "/etc/passwd", SubPath: "passwd", ReadOnly: true},
			volumeMount{Name: "accounts", MountPath: "/etc/group", SubPath: "group", ReadOnly: true})
		inits = []container{
			// Copies the agent in from its image.
			helper("agent-install", in.AgentImage, []string{"/cordon-agent", "install", agentPath},
				volumeMount{Name: "agent", MountPath: agentDir}),
			// Writes the image's accounts with the sandbox user's, running
			// the agent just copied in the sandbox's image.
			helper("accounts", in.Image, []string{agentPath, "accounts", strconv.Itoa(in.UID), "/accounts"},
				volumeMount{Name: "agent", MountPath: agentDir, ReadOnly: true}, volumeMount{Name: "accounts", MountPath: "/accounts"}),
		}
	}
	for i, d := range baseline.ScratchDirs {
		// The writable paths are memory, within the space (the kubelet
		// sizes a memory-backed emptyDir's tmpfs by its limit); the agent
		// gives each its mode and owner before anything runs
		// (CORDON_AGENT_SCRATCH_MODES).
		name := "scratch-" + strconv.Itoa(i)
		v := volume{Name: name, EmptyDir: &emptyDir{Medium: "Memory", SizeLimit: quantity(d.Size(budget))}}
		if d.Path == baseline.Workspace && in.Claim != "" {
			v = volume{Name: name, PersistentVolumeClaim: &claimVolume{ClaimName: in.Claim}}
		}
		volumes = append(volumes, v)
		mounts = append(mounts, volumeMount{Name: name, MountPath: d.Path})
		writable = append(writable, d.Path)
	}
	env = append(env, baseline.EnvPrefix+"TOKEN_FILE="+tokenDir+"/"+tokenKey,
		baseline.EnvPrefix+"PORT="+strconv.Itoa(AgentPort),
		baseline.EnvPrefix+"SCRATCH_MODES=1",
		// The node's memory cgroup is out of the host's reach: the agent
		// counts the OOM kills in its own.
		baseline.EnvPrefix+"COUNT_OOM=1",
		// The agent starts as the container's root with the four
		// capabilities it needs to take an identity apart from the
		// workload's, and drops them before it serves; commands run as the
		// sandbox user with none (as on the docker tier).
		baseline.EnvPrefix+"WORKLOAD_USER="+fmt.Sprintf("%d:%d", in.UID, in.UID))
	if in.Landlock != "" {
		env = append(env, baseline.EnvPrefix+"LANDLOCK="+in.Landlock,
			baseline.EnvPrefix+"WRITABLE="+strings.Join(slices.Sorted(slices.Values(writable)), ":"))
	}
	slices.Sort(env)
	var vars []envVar
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars = append(vars, envVar{Name: k, Value: v})
	}
	var caps []string
	for _, c := range baseline.AgentCapabilities {
		caps = append(caps, strings.TrimPrefix(c, "CAP_"))
	}
	if in.GVisor {
		caps = append(caps, "SYS_PTRACE")
	}
	res := resources{}
	if in.Limits.MemoryBytes > 0 || in.Limits.CPUs > 0 {
		// Requests equal to limits: the scheduler places the sandbox where
		// what it may use is free.
		res.Limits, res.Requests = map[string]string{}, map[string]string{}
		if in.Limits.MemoryBytes > 0 {
			res.Limits["memory"] = quantity(in.Limits.MemoryBytes)
		}
		if in.Limits.CPUs > 0 {
			res.Limits["cpu"] = strconv.FormatInt(int64(in.Limits.CPUs*1000), 10) + "m"
		}
		maps.Copy(res.Requests, res.Limits)
	}
	return &pod{
		APIVersion: "v1", Kind: "Pod",
		Metadata: meta{Name: in.Name, Labels: maps.Clone(in.Labels)},
		Spec: podSpec{
			// A sandbox that ends is gone.
			RestartPolicy: "Never",
			// No credential for the cluster's API, no service addresses in
			// the environment, nothing of the node's shared.
			AutomountServiceAccountToken: &no,
			EnableServiceLinks:           &no,
			ShareProcessNamespace:        &no,
			Hostname:                     baseline.Hostname,
			RuntimeClassName:             in.RuntimeClass,
			// The agent stops its commands on SIGTERM; a short grace.
			TerminationGracePeriodSeconds: &grace,
			// The container runtime's default system-call filter, for every
			// container; the agent adds the baseline's to every command.
			// A System V segment no process holds is removed, so that the
			// pod's memory limit, and an OOM kill, bound them: the bounds
			// the other tiers set (baseline.SysVIPC) are no "safe" sysctls,
			// which a kubelet refuses unless its operator allows them.
			SecurityContext: &podSecurity{SeccompProfile: &seccompProfile{Type: "RuntimeDefault"}, Sysctls: []sysctl{{"kernel.shm_rmid_forced", "1"}}},
			// No resolver: nothing in the sandbox resolves names (the
			// network policy admits addresses), and a lookup fails at once.
			DNSPolicy:      "None",
			DNSConfig:      &dnsConfig{Nameservers: []string{"127.0.0.1"}, Options: []dnsOption{{"timeout", "1"}, {"attempts", "1"}}},
			InitContainers: inits,
			Containers: []container{{
				Name: agentName, Image: in.Image, ImagePullPolicy: "IfNotPresent",
				// The agent is the entrypoint.
				Command:    []string{agentPath},
				Args:       []string{},
				WorkingDir: baseline.Workspace,
				Env:        vars,
				// The agent's port, on the pod network: the only way in (the
				// network policy admits nothing else), and it serves nobody
				// without the token.
				Ports:        []containerPort{{Name: "agent", ContainerPort: AgentPort, Protocol: "TCP"}},
				Resources:    res,
				VolumeMounts: mounts,
				SecurityContext: &security{
					RunAsUser: &root, RunAsGroup: &root,
					Privileged: &no,
					// Nothing gains a privilege by executing a file.
					AllowPrivilegeEscalation: &no,
					// The image is read-only; the writable paths are the
					// memory volumes above.
					ReadOnlyRootFilesystem: &yes,
					// None of the runtime's default capabilities; the agent's
					// four alone, which it drops (above).
					Capabilities:   &capabilities{Drop: []string{"ALL"}, Add: caps},
					SeccompProfile: &seccompProfile{Type: "RuntimeDefault"},
					// /proc with the runtime's masked and read-only paths.
					ProcMount: "Default",
				},
			}},
			Volumes: volumes,
		},
	}
}

// helper is an init container: it runs as nobody, with nothing else.
func helper(name, image string, command []string, mounts ...volumeMount) container {
	yes, no := true, false
	nobody := int64(65534)
	return container{
		Name: name, Image: image, ImagePullPolicy: "IfNotPresent",
		Command: command, VolumeMounts: mounts,
		SecurityContext: &security{
			RunAsUser: &nobody, RunAsGroup: &nobody, RunAsNonRoot: &yes,
			Privileged: &no, AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &yes,
			Capabilities: &capabilities{Drop: []string{"ALL"}},
		},
		// Requests of its own: without them they would be its limits,
		// and a pod's requests are at least its init containers', so
		// each sandbox would hold half a core of its node's.
		Resources: resources{Limits: map[string]string{"memory": "64Mi", "cpu": "500m"}, Requests: map[string]string{"memory": "16Mi", "cpu": "10m"}},
	}
}

// renderPolicy is the sandbox's NetworkPolicy: ingress to the agent's port
// alone, egress as policy allows. The cluster enforces addresses, not
// names: a rule that names a host is refused.
func renderPolicy(name string, labels map[string]string, rules []egress.Rule, mode egress.Mode, from *Peer) (*networkPolicy, error) {
	ingress := policyRule{Ports: []policyPort{{Protocol: "TCP", Port: AgentPort}}}
	if from != nil {
		// The daemon's pods alone: nothing else in the cluster can so
		// much as hold a connection to the agent open.
		ingress.From = []policyPeer{{
			NamespaceSelector: &labelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": from.Namespace}},
			PodSelector:       &labelSelector{MatchLabels: maps.Clone(from.Labels)},
		}}
	}
	np := &networkPolicy{
		APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy",
		Metadata: meta{Name: name, Labels: maps.Clone(labels)},
		Spec: networkPolicySpec{
			PodSelector: labelSelector{MatchLabels: map[string]string{LabelSandbox: name}},
			PolicyTypes: []string{"Ingress", "Egress"},
			Ingress:     []policyRule{ingress},
			Egress:      []policyRule{},
		},
	}
	switch mode {
	case egress.DenyAll:
	case egress.AllowAll:
		// Anywhere public: private, loopback, link-local and shared
		// ranges stay refused, as at the egress proxy (the cluster's own
		// addresses, the node's metadata service among them).
		np.Spec.Egress = []policyRule{{To: []policyPeer{
			{IPBlock: &ipBlock{CIDR: "0.0.0.0/0", Except: privateV4}},
			{IPBlock: &ipBlock{CIDR: "::/0", Except: privateV6}},
		}}}
	case egress.Static, egress.Dynamic:
		for _, r := range rules {
			prefix, err := rulePrefix(r.Host)
			if err != nil {
				return nil, err
			}
			ports := r.Ports
			if len(ports) == 0 {
				ports = egress.DefaultPorts
			}
			rule := policyRule{To: []policyPeer{{IPBlock: &ipBlock{CIDR: prefix.String()}}}}
			for _, p := range ports {
				rule.Ports = append(rule.Ports, policyPort{Protocol: "TCP", Port: p})
			}
			np.Spec.Egress = append(np.Spec.Egress, rule)
		}
	default:
		return nil, fmt.Errorf("%w: egress mode %q", sandbox.ErrInvalidSpec, mode)
	}
	return np, nil
}

var (
	privateV4 = []string{"10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12", "192.168.0.0/16", "0.0.0.0/8"}
	privateV6 = []string{"::1/128", "fc00::/7", "fe80::/10", "::ffff:0:0/96"}
)

// rulePrefix is the address range an IP or CIDR rule names; a rule that
// names a host is refused, with what to do instead.
func rulePrefix(host string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(host); err == nil {
		return p.Masked(), nil
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	return netip.Prefix{}, &sandbox.UnsupportedError{Tier: Name, What: fmt.Sprintf(
		"an egress rule that names a host (%q): the cluster enforces addresses only, as a NetworkPolicy; allow its addresses as IP or CIDR rules, or run the sandbox on a tier with cordon's egress proxy", host)}
}

// quantity is n bytes as a Kubernetes quantity.
func quantity(n int64) string {
	switch {
	case n%(1<<30) == 0:
		return strconv.FormatInt(n>>30, 10) + "Gi"
	case n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + "Mi"
	case n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + "Ki"
	}
	return strconv.FormatInt(n, 10)
}

func ptr[T any](v T) *T { return &v }
