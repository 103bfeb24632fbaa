package host

import (
	"crypto/rand"
	"encoding/binary"
	"os"
)

// IDRange is the block of host ids a sandbox's ids 0-65535 map to. As root
// every sandbox gets its own block, from a range no ordinary account uses;
// without privilege only the caller's own id can be mapped, to the
// sandbox's root (which holds no capabilities once the sandbox is built).
func IDRange() (hostBase, size int) {
	if os.Geteuid() != 0 {
		return os.Geteuid(), 1
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return 1<<30 + int(binary.BigEndian.Uint32(b[:])%(1<<14))<<16, 1 << 16
}
