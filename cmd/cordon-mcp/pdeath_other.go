//go:build !linux

package main

import "os/exec"

// dieWithParent: only Linux has a parent-death signal; elsewhere the
// private daemon (whose tiers need Linux anyway) is stopped on exit.
func dieWithParent(*exec.Cmd) {}
