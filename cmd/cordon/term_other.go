//go:build !linux

package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// isTerminal: f is a terminal (TIOCGETA is the BSDs' and macOS's TCGETS).
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TIOCGETA)
	return err == nil
}
