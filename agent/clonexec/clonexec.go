// Package clonexec starts a process in new namespaces, a user namespace
// among them, without copying the parent's address space.
//
// syscall.ForkExec cannot share the parent's memory with a child that gets
// a user namespace: the child must wait for the parent to write its ID
// maps, and a vfork parent is suspended until the child execs. So it forks
// in full: the parent's page tables are copied and write-protected, and
// the parent then faults on every page it writes. Where a page fault is
// dear (13.5 µs on the PVM guests we test on)
// that is the largest cost of a sandbox's start after the Go runtime's own.
//
// Start clones with CLONE_VM instead, without CLONE_VFORK: the child runs
// on a stack of its own, executes a list of system calls prepared by the
// parent (no Go code runs in it), waits on a pipe while the parent writes
// its ID maps, and execs. Only what syscall.ForkExec does for the
// attributes Supported accepts is done; for anything else, or on an
// architecture without the child's assembly, callers use syscall.ForkExec.
package clonexec

import "fmt"

// StepError says which of the child's steps failed before its exec, or
// which of its helper's calls failed (Helper.Err).
type StepError struct {
	Step   string
	Err    error
	Helper bool
}

func (e *StepError) Error() string {
	if e.Helper {
		return fmt.Sprintf("%s: %v", e.Step, e.Err)
	}
	return fmt.Sprintf("start process: %s: %v", e.Step, e.Err)
}
func (e *StepError) Unwrap() error { return e.Err }

// step is one system call of the child's, as cloneRun reads it: the
// layout (96 bytes) is fixed by clone_linux_amd64.s.
type step struct {
	nr, a1, a2, a3, a4, a5, a6 uintptr
	check, want                uintptr // how the result is judged (check*)
	result, failed             uintptr // written by the child
	from                       uintptr // when set, the address a1 is read from (an earlier step's result)
}

const (
	checkNone  = 0 // the result is not looked at
	checkErrno = 1 // an error fails the step
	checkWant  = 2 // any result but want fails the step
	checkSpawn = 3 // a clone whose new process runs a Helper's steps (want, a6 of them)
	// checkErrnoExcept: as checkErrno, but the result want (one error) passes.
	checkErrnoExcept = 4
)
