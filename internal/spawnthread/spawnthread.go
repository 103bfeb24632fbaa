// Package spawnthread starts child processes from one OS thread that never
// exits. A parent-death signal fires when the *thread* that forked a child
// exits, and Go ends threads that a goroutine locked and never unlocked
// (code that enters a network namespace does exactly that); forking every
// sandbox from a permanent thread means the signal fires only when the
// whole process dies.
package spawnthread

import (
	"runtime"
	"sync"
)

var (
	once  sync.Once
	queue chan func()
)

// Do runs f on the spawning thread and waits for it.
func Do(f func()) {
	once.Do(func() {
		queue = make(chan func())
		go func() {
			runtime.LockOSThread() // never unlocked: this thread lives as long as the process
			for g := range queue {
				g()
			}
		}()
	})
	done := make(chan struct{})
	queue <- func() {
		defer close(done)
		f()
	}
	<-done
}
