//go:build !cordon_light

package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"sync"

	"github.com/cordon-sandbox/cordon/backend/docker"
	"github.com/cordon-sandbox/cordon/backend/kubernetes"
	"github.com/cordon-sandbox/cordon/backend/microvm"
	"github.com/cordon-sandbox/cordon/backend/oci"
	"github.com/cordon-sandbox/cordon/backend/passthrough"
	"github.com/cordon-sandbox/cordon/backend/process"
	"github.com/cordon-sandbox/cordon/image"
	"github.com/cordon-sandbox/cordon/sandbox"
)

// buildName names this build in `cordon version`.
const buildName = "full"

// runsHere reports whether this build can run spec itself: the full
// build runs every tier (see light.go).
func runsHere(sandbox.Spec) bool { return true }

func newProvider(opts ...sandbox.Option) *sandbox.Provider {
	opts = append([]sandbox.Option{sandbox.WithDefaultTier(defaultTier), sandbox.WithImages(&imageCache{dir: imageDir()})}, opts...)
	return sandbox.NewProvider(backends(stateDir(), nil), opts...)
}

// daemonTiers is how the daemon runs the tiers: sandboxes detached (they
// outlive a restart; elsewhere they die with their creator), started through a spawner where the daemon
// cannot start them without copying its memory (it lives long and grows),
// and Prestart inits kept waiting.
type daemonTiers struct {
	prestart int
	kube     kubernetes.Config // what cordon serve's flags set
	// ephemeral: no later daemon takes this one's sandboxes back (cordon
	// serve --ephemeral), so the host tiers' die with it, however it
	// ends, as a cordon run's do. (A cluster has no lifeline: pods stay
	// detached, deleted when the daemon stops.)
	ephemeral bool
	// owner is the daemon's id (registryOwner), which labels its pods.
	owner string
}

// kubeConfig is the kubernetes tier's configuration from the environment:
// the cluster as kubectl finds it (KUBECONFIG, ~/.kube/config, a pod's
// service account) and CORDON_KUBE_*; cordon serve's flags override it.
func kubeConfig() kubernetes.Config {
	// (A malformed one is refused where it is a flag; here it is as if
	// unset, and the agents admit any peer with the token.)
	ingress, _ := kubernetes.ParsePeer(os.Getenv("CORDON_KUBE_AGENT_INGRESS"))
	return kubernetes.Config{
		AgentIngress:  ingress,
		Namespace:     os.Getenv("CORDON_KUBE_NAMESPACE"),
		Image:         os.Getenv("CORDON_KUBE_IMAGE"),
		AgentImage:    os.Getenv("CORDON_KUBE_AGENT_IMAGE"),
		AgentInImage:  os.Getenv("CORDON_KUBE_AGENT_IN_IMAGE"),
		RuntimeClass:  os.Getenv("CORDON_KUBE_RUNTIME_CLASS"),
		StorageClass:  os.Getenv("CORDON_KUBE_STORAGE_CLASS"),
		NetworkPolicy: os.Getenv("CORDON_KUBE_NETWORK_POLICY") == "enforced",
		Owner:         "cordon-run",
	}
}

// backends are the tiers cordon offers, their state under base ("" for
// their defaults), for the daemon when d is set.
func backends(base string, d *daemonTiers) []sandbox.Backend {
	pcfg := process.Config{StateDir: base}
	detached := d != nil && !d.ephemeral
	if d != nil {
		pcfg.Detached, pcfg.Spawner, pcfg.Prestart = detached, true, d.prestart
	}
	// CORDON_OCI_RUNTIME names the container tier's runtime (crun, runc
	// or a path); unset, the tier takes crun, then runc.
	ociRuntime := os.Getenv("CORDON_OCI_RUNTIME")
	ociDir, gvisorDir, dockerDir, mvDir := "", "", "", ""
	if base != "" {
		ociDir, gvisorDir, dockerDir, mvDir = filepath.Join(base, oci.StateName(oci.Name, ociRuntime)), filepath.Join(base, "gvisor"), filepath.Join(base, "docker"), filepath.Join(base, "microvm")
	}
	// The docker tier's containers are labelled with their owner: a
	// daemon's (named by its state directory, so that two daemons on one
	// engine never sweep each other's) or the CLI's.
	dcfg := docker.Config{StateDir: dockerDir, Image: os.Getenv("CORDON_DOCKER_IMAGE"), Owner: "cordon-run"}
	if d != nil {
		dcfg.Detached, dcfg.Owner = detached, "cordon-daemon-"+ownerTag(base)
	}
	// The kubernetes tier's pods are labelled with the daemon's registry's
	// id: daemons on different hosts may share a cluster, and the same
	// state directory there. (Its pods were labelled by that directory
	// once, and are still taken back by that label, never swept by it.)
	kcfg := kubeConfig()
	if d != nil {
		kcfg = d.kube
		kcfg.Detached, kcfg.Owner = true, "cordon-daemon-"+d.owner
		kcfg.FormerOwners = []string{"cordon-daemon-" + ownerTag(base)}
	}
	return []sandbox.Backend{
		process.New(pcfg),
		oci.New(oci.Config{Runtime: ociRuntime, StateDir: ociDir, Detached: detached}),
		oci.New(oci.Config{Tier: oci.GVisor, StateDir: gvisorDir, Detached: detached}),
		docker.New(dcfg),
		kubernetes.New(kcfg),
		passthrough.New(passthrough.Config{}),
		microvm.New(microvm.Config{StateDir: mvDir, Detached: detached}),
	}
}

// ownerTag names a daemon by its state directory.
func ownerTag(base string) string {
	if abs, err := filepath.Abs(base); err == nil {
		base = abs
	}
	sum := sha256.Sum256([]byte(base))
	return hex.EncodeToString(sum[:6])
}

// imageCache is the image cache as the sandbox core takes it
// (sandbox.Images): opened when a sandbox first names an image, unless
// given open, so that a command that names none does not pay for opening
// the cache and sweeping its leftovers.
type imageCache struct {
	dir  string
	once sync.Once
	st   *image.Store
	err  error
}

func (c *imageCache) Root(ctx context.Context, ref string) (string, func(), sandbox.ImageConfig, error) {
	c.once.Do(func() {
		if c.st == nil {
			c.st, c.err = image.Open(c.dir, image.DefaultLimits)
		}
	})
	if c.err != nil {
		return "", nil, sandbox.ImageConfig{}, c.err
	}
	root, release, rec, err := c.st.Root(ctx, ref)
	if err != nil {
		return "", nil, sandbox.ImageConfig{}, err
	}
	return root, release, sandbox.ImageConfig{Env: rec.Env, User: rec.User}, nil
}

// imageStore is the CLI's image cache, or nil when it cannot be opened
// (imageCache then tries again when a sandbox names an image, and says
// why).
func imageStore() *image.Store {
	st, err := image.Open(imageDir(), image.DefaultLimits)
	if err != nil {
		return nil
	}
	return st
}

// dockerStateDir is the docker tier's state directory for the CLI.
func dockerStateDir() string {
	if base := stateDir(); base != "" {
		return filepath.Join(base, "docker")
	}
	return ""
}
