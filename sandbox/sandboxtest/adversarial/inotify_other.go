//go:build !linux

package adversarial

// hostInotify: only Linux has inotify, and sandboxes.
func hostInotify() error { return nil }
