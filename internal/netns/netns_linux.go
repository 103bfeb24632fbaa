// Package netns runs a function inside another network namespace, on a
// locked thread that enters it and comes back. Sockets keep the namespace
// they were made in, so a connection or listener made inside stays there.
package netns

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Do runs f with the calling goroutine's thread in the namespace at path
// (for example /run/netns/NAME). A thread that cannot come back is never
// unlocked, so the runtime discards it rather than reuse it in the wrong
// namespace.
func Do(path string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		home, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			errc <- err
			return
		}
		defer home.Close()
		ns, err := os.Open(path)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer ns.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter %s: %w", path, err)
			return
		}
		err = f()
		if unix.Setns(int(home.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}
