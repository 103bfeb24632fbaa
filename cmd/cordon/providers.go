package main

import (
	"os"
	"path/filepath"

	"github.com/cordon-sandbox/cordon/backend/oci"
	"github.com/cordon-sandbox/cordon/backend/passthrough"
	"github.com/cordon-sandbox/cordon/backend/process"
	"github.com/cordon-sandbox/cordon/image"
	"github.com/cordon-sandbox/cordon/sandbox"
)

// defaultTier is the tier `cordon run` uses when --tier is not given.
const defaultTier = process.Name

func newProvider(opts ...sandbox.Option) *sandbox.Provider {
	opts = append([]sandbox.Option{sandbox.WithDefaultTier(defaultTier), sandbox.WithImageDir(imageDir())}, opts...)
	return sandbox.NewProvider(backends(stateDir(), nil), opts...)
}

// stateDir is where the tiers keep their host-side state: CORDON_STATE_DIR,
// or each tier's default (under /run/cordon as root).
func stateDir() string { return os.Getenv("CORDON_STATE_DIR") }

// daemonTiers is how the daemon runs the tiers: sandboxes detached (they
// outlive a restart; elsewhere they die with their creator), started through a spawner where the daemon
// cannot start them without copying its memory (it lives long and grows),
// and Prestart inits kept waiting.
type daemonTiers struct{ prestart int }

// backends are the tiers cordon offers, their state under base ("" for
// their defaults), for the daemon when d is set.
func backends(base string, d *daemonTiers) []sandbox.Backend {
	pcfg := process.Config{StateDir: base}
	if d != nil {
		pcfg.Detached, pcfg.Spawner, pcfg.Prestart = true, true, d.prestart
	}
	ociDir, gvisorDir := "", ""
	if base != "" {
		ociDir, gvisorDir = filepath.Join(base, "oci"), filepath.Join(base, "gvisor")
	}
	return []sandbox.Backend{
		process.New(pcfg),
		oci.New(oci.Config{StateDir: ociDir, Detached: d != nil}),
		oci.New(oci.Config{Tier: oci.GVisor, StateDir: gvisorDir, Detached: d != nil}),
		passthrough.New(passthrough.Config{}),
	}
}

// imageStore is the CLI's image cache, or nil (the provider's default)
// when it cannot be opened; a sandbox that names an image then reports why.
func imageStore() *image.Store {
	st, err := image.Open(imageDir(), image.DefaultLimits)
	if err != nil {
		return nil
	}
	return st
}
