// Package clonexec starts a process in new namespaces, a user namespace
// among them, without copying the parent's address space.
//
// syscall.ForkExec cannot share the parent's memory with a child that gets
// a user namespace: the child must wait for the parent to write its ID
// maps, and a vfork parent is suspended until the child execs. So it forks
// in full: the parent's page tables are copied and write-protected, and
// the parent then faults on every page it writes. Where a page fault is
// dear (13.5 µs on the PVM guests of docs/benchmarks.md, ninth session)
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

// StepError says which of the child's steps failed before its exec.
type StepError struct {
	Step string
	Err  error
}

func (e *StepError) Error() string { return fmt.Sprintf("start process: %s: %v", e.Step, e.Err) }
func (e *StepError) Unwrap() error { return e.Err }
