//go:build unix

package main

import (
	"os"
	"syscall"
)

// flock takes f's exclusive lock, or fails at once if another holds it.
func flock(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}
