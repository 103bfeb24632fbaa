// Package disk keeps a persistent workspace's writable space: an ext4
// file system in a sparse image file of its own, whose size is the
// sandbox's disk quota (a full one is ENOSPC), loop-mounted on the host
// while the sandbox runs and kept on disk while it is stopped, across
// daemon restarts and host reboots.
package disk

import "errors"

// MinBytes is the smallest image: below it ext4's own metadata leaves
// too little room to be worth a sandbox.
const MinBytes = 16 << 20

// ErrInUse: the image is still attached to a loop device (a mount of it
// lingers), so mounting it again would have two file systems write one
// image.
var ErrInUse = errors.New("the disk image is still in use")
