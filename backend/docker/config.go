// Package docker is the Docker Engine tier: each sandbox is a container
// the engine runs (through its API, as the docker CLI reaches it, honouring
// DOCKER_HOST), with cordon-agent bound in read-only as its entrypoint and
// the security baseline rendered as the container's configuration (render).
// The agent is reached on a unix socket in a host directory bound in, and
// the sandbox's only way out is the egress socket beside it: the container
// has no network. The engine must run on this host, where those
// directories are.
package docker

// Name is the tier's name.
const Name = "docker"

// Config configures the backend.
type Config struct {
	// Host is the engine's address (unix:///var/run/docker.sock); empty
	// means DOCKER_HOST, then the engine's default, as the docker CLI has
	// it.
	Host string
	// Image is the image of a sandbox whose spec names none; empty means
	// DefaultImage.
	Image string
	// AgentPath is the cordon-agent binary; empty means agentbin.Find.
	AgentPath string
	// StateDir holds each sandbox's socket directory and the files bound
	// into it; empty means /run/cordon/docker.
	StateDir string
	// Detached sandboxes outlive the process that created them (a daemon
	// that restarts takes them back with Adopt). Otherwise a sandbox's
	// agent stops once its creator is gone (its lifeline, the container's
	// standard input, closes).
	Detached bool
	// Owner labels the containers this backend makes, so that Sweep
	// removes only its own (a daemon's id); empty means "cordon".
	Owner string
}

// DefaultImage is a sandbox's image when neither its spec nor Config names
// one.
const DefaultImage = "debian:bookworm-slim"

// Labels on every container of this tier.
const (
	LabelTier    = "dev.cordon.tier"
	LabelOwner   = "dev.cordon.owner"
	LabelSandbox = "dev.cordon.sandbox"
)
