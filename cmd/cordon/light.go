//go:build cordon_light

package main

// The light build of cordon (-tags cordon_light), which scripts/setup.sh
// installs as bin/cordon: every verb but those that need the daemon's
// code, the image cache's registry client or the tiers beyond the process
// and passthrough ones, which it hands to the full build installed beside
// it as cordon-full. What it leaves out is what a `cordon run` would
// otherwise start and never use: the package initialisation and the size
// of all of it cost a run of `true` 1.7 ms here (docs/benchmarks.md).

import (
	"github.com/cordon-sandbox/cordon/backend/passthrough"
	"github.com/cordon-sandbox/cordon/backend/process"
	"github.com/cordon-sandbox/cordon/sandbox"
)

// buildName names this build in `cordon version`.
const buildName = "light"

var (
	serveCmd     = handOff("serve")
	runServerCmd = handOff("run-server")
	imageCmd     = handOff("image")
	tiersCmd     = handOff("tiers")
)

// handOff is a verb the full build runs.
func handOff(verb string) func([]string) int {
	return func(args []string) int { return execFull(verb, args) }
}

// runsHere reports whether this build can run spec itself: a tier of its
// own, no image.
func runsHere(spec sandbox.Spec) bool {
	return spec.Image == "" && (spec.Tier == "" || spec.Tier == process.Name || spec.Tier == passthrough.Name)
}

func newProvider(opts ...sandbox.Option) *sandbox.Provider {
	opts = append([]sandbox.Option{sandbox.WithDefaultTier(defaultTier)}, opts...)
	return sandbox.NewProvider([]sandbox.Backend{process.New(process.Config{StateDir: stateDir()}), passthrough.New(passthrough.Config{})}, opts...)
}
