package server

import (
	"os"

	"golang.org/x/sys/unix"
)

// datasync makes f's data durable (and only the metadata needed to read
// it back).
func datasync(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }
