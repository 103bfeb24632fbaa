//go:build !linux

package testutil

// StopEngine stops the test binary's Docker engine: there is none off
// Linux.
func StopEngine() {}
