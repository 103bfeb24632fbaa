//go:build !linux

package main

import "os/exec"

// startTied starts cmd: only Linux has a parent-death signal; elsewhere
// the private daemon (whose tiers need Linux anyway) is stopped on exit.
func startTied(cmd *exec.Cmd) error { return cmd.Start() }
