//go:build !linux

package server

import "os"

// datasync makes f's data durable: fsync where there is no fdatasync
// (on macOS, os.File.Sync asks the drive to flush too).
func datasync(f *os.File) error { return f.Sync() }
