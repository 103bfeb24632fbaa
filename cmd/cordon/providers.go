package main

import (
	"github.com/cordon-sandbox/cordon/backend/passthrough"
	"github.com/cordon-sandbox/cordon/backend/process"
	"github.com/cordon-sandbox/cordon/sandbox"
)

// defaultTier is the tier `cordon run` uses when --tier is not given.
const defaultTier = process.Name

func newProvider() *sandbox.Provider {
	return sandbox.NewProvider([]sandbox.Backend{
		process.New(process.Config{}),
		passthrough.New(passthrough.Config{}),
	}, sandbox.WithDefaultTier(defaultTier))
}
