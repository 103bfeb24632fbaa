// Package kubernetes is the Kubernetes tier: each sandbox is a pod in a
// configured namespace, running cordon-agent as its container's
// entrypoint, reached over TCP on the pod network with a per-sandbox
// token that a Secret owned by the pod carries (read from a file, never in
// the pod's spec). The security baseline is rendered as the pod's spec
// (render), and the egress policy as a NetworkPolicy owned by the pod,
// which the cluster's network plugin enforces. The tier speaks the API
// by hand (api), as the docker tier speaks the Engine API.
package kubernetes

import (
	"fmt"
	"strings"
	"time"
)

// Name is the tier's name.
const Name = "kubernetes"

// Config configures the backend.
type Config struct {
	// Kubeconfig is the kubeconfig file (a KUBECONFIG list); empty means
	// KUBECONFIG, then ~/.kube/config, then the in-cluster configuration
	// of a pod's service account.
	Kubeconfig string
	// Context is the kubeconfig's context; empty means its current one.
	Context string
	// Namespace holds the sandboxes; empty means the context's, or
	// "default".
	Namespace string
	// Image is a sandbox's image when its spec names none; empty means
	// DefaultImage.
	Image string
	// AgentImage holds cordon-agent (at /cordon-agent, as the image
	// deploy/kubernetes builds): an init container copies it into the
	// pod, where the sandbox's own image runs it. Empty means
	// DefaultAgentImage.
	AgentImage string
	// AgentInImage, when set, is where every sandbox image holds
	// cordon-agent (images built with it, and with the sandbox user in
	// their accounts): the pod then has no init containers, which the
	// kubelet notices finished only at its next relist (about a second
	// each). Empty means the agent comes from AgentImage, and the
	// accounts are merged, by init containers.
	AgentInImage string
	// RuntimeClass is the pods' RuntimeClass (gvisor, kata); empty means
	// the cluster's default runtime.
	RuntimeClass string
	// NetworkPolicy says the cluster's network plugin enforces
	// NetworkPolicy. The API server accepts a policy whether or not
	// anything enforces it, so the operator says so; without it the tier
	// refuses every sandbox rather than start one whose egress is open.
	NetworkPolicy bool
	// GVisorClasses are the RuntimeClasses whose pods run on gVisor's
	// kernel; nil means DefaultGVisorClasses. There the agent keeps
	// CAP_SYS_PTRACE, without which gVisor will not show it its commands'
	// descriptors (as on the gvisor tier); it means nothing beyond
	// gVisor's kernel.
	GVisorClasses []string
	// AgentIngress, when set, is the only peer the sandboxes' agents
	// admit connections from (the daemon's own pods, where it runs in the
	// cluster); empty means any peer, which the agent still refuses
	// without the token (a daemon outside the cluster, reaching the pods
	// from a node or beyond).
	AgentIngress *Peer
	// StorageClass is the class of a persistent workspace's claim
	// (Spec.PersistentWorkspace); empty means the cluster's default.
	StorageClass string
	// WorkspaceSize is a persistent workspace's size when the spec's
	// writable space gives none; zero means DefaultWorkspaceSize.
	WorkspaceSize int64
	// Detached pods outlive the process that made them (a daemon, which
	// takes them back with Adopt). Otherwise nothing ties a pod to its
	// maker's life (a cluster has no lifeline), so its agent exits after
	// UnattendedIdle without work unless the spec sets its own idle
	// timeout, and the backend deletes its owner's pods that have ended
	// once per process.
	Detached bool
	// Owner labels the objects this backend makes, so that Sweep removes
	// only its own (a daemon's id); empty means "cordon".
	Owner string
	// FormerOwners are labels its objects carried under an earlier name:
	// Adopt takes those back (their names are in its registry), and Sweep
	// never removes by them (another daemon may carry them still).
	FormerOwners []string
}

// Peer names pods: those labelled Labels in the namespace Namespace.
type Peer struct {
	Namespace string
	Labels    map[string]string
}

// ParsePeer reads a peer written NAMESPACE/KEY=VALUE[,KEY=VALUE...], as
// cordon serve --kube-agent-ingress takes it.
func ParsePeer(s string) (*Peer, error) {
	ns, sel, ok := strings.Cut(s, "/")
	if !ok || ns == "" || sel == "" {
		return nil, fmt.Errorf("%q: want NAMESPACE/KEY=VALUE[,KEY=VALUE...], the daemon's pods", s)
	}
	p := &Peer{Namespace: ns, Labels: map[string]string{}}
	for _, kv := range strings.Split(sel, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q: %q is not KEY=VALUE", s, kv)
		}
		p.Labels[k] = v
	}
	return p, nil
}

// DefaultImage is a sandbox's image when neither its spec nor Config
// names one.
const DefaultImage = "debian:bookworm-slim"

// DefaultAgentImage is the agent's image when Config names none.
const DefaultAgentImage = "ghcr.io/cordon-sandbox/cordon-agent:latest"

// UnattendedIdle is how long the agent of a pod not Detached waits without
// work before it exits (its maker may have died without deleting it).
const UnattendedIdle = time.Minute

// DefaultGVisorClasses are the RuntimeClasses taken for gVisor's.
var DefaultGVisorClasses = []string{"gvisor", "runsc"}

// DefaultWorkspaceSize is a persistent workspace's size by default.
const DefaultWorkspaceSize = 1 << 30

// AgentPort is the agent's port in the pod.
const AgentPort = 2024

// Labels on every object of this tier.
const (
	LabelTier    = "dev.cordon.tier"
	LabelOwner   = "dev.cordon.owner"
	LabelSandbox = "dev.cordon.sandbox"
)
