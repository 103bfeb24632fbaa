//go:build !linux

package testutil

// StopCluster does nothing: the test cluster runs only on Linux.
func StopCluster() {}
