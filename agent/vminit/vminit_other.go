//go:build !linux

package vminit

import "github.com/cordon-sandbox/cordon/agent/startup"

// Main runs only on Linux.
func Main(serve func(env []string, opts startup.Options) (func() int, int)) int { return 1 }

// IsGuest is false off Linux.
func IsGuest() bool { return false }
