//go:build !linux

package image

import (
	"errors"
	"io"
)

// unpacker off Linux refuses: layers are applied with openat2's
// RESOLVE_IN_ROOT, which only Linux has, so that no entry can reach
// outside the root; there is no safe way to do it without.
type unpacker struct{ bytes int64 }

var errUnpackLinux = errors.New("unpacking images needs Linux (openat2 RESOLVE_IN_ROOT)")

func newUnpacker(string, Limits) (*unpacker, error) { return nil, errUnpackLinux }

func (u *unpacker) close()                {}
func (u *unpacker) apply(io.Reader) error { return errUnpackLinux }
