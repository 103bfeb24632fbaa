package main

import (
	"os"

	"github.com/cordon-sandbox/cordon/backend/passthrough"
	"github.com/cordon-sandbox/cordon/backend/process"
	"github.com/cordon-sandbox/cordon/image"
	"github.com/cordon-sandbox/cordon/sandbox"
)

// defaultTier is the tier `cordon run` uses when --tier is not given.
const defaultTier = process.Name

func newProvider() *sandbox.Provider {
	return sandbox.NewProvider([]sandbox.Backend{
		// CORDON_STATE_DIR moves the process tier's host-side state (default
		// /run/cordon as root).
		process.New(process.Config{StateDir: os.Getenv("CORDON_STATE_DIR")}),
		passthrough.New(passthrough.Config{}),
	}, sandbox.WithDefaultTier(defaultTier), sandbox.WithImageStore(imageStore()))
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
