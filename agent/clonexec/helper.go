package clonexec

import (
	"syscall"
	"unsafe"
)

// Helper is a list of system calls run by a second process, which Start's
// child starts just before its exec, with the child's namespaces and
// credentials and only the descriptors it placed. It runs alongside the
// child's exec and whatever the executed program does first, so that work
// both would otherwise do one after the other is done at once: the process
// tier's init starts its Go runtime while its helper builds the sandbox's
// root. The helper is the child's own child (the exec does not change
// that; it exits with SIGCHLD and the child reaps it), and is possible only
// in a new PID namespace, where it cannot outlive the child.
//
// A Helper shares this process's memory until it exits: the caller keeps
// it, and every buffer its calls point into (Keep), reachable until then.
// The helper stops at the first call that fails and exits 127; it exits 0
// after the last. Err names the failed call once it has exited.
type Helper struct {
	// Fill, when set, completes the calls once the child exists, before
	// it goes on from waiting for its ID maps: a caller can plan them
	// meanwhile, beside the clone, and Fill waits for that plan. It returns
	// false for no helper after all (the child then starts none).
	Fill func() bool
	// Cloned, when set, is called with the child's pid once the child goes
	// on towards its exec (its ID maps written), on the thread that
	// cloned, which then waits for the exec: work on the child that need
	// not wait for the exec (the process tier's cgroups, which it joins)
	// is done there, beside the exec, instead of after it. The child is
	// not reaped before Start returns, so the pid is its own meanwhile.
	Cloned func(pid int)

	steps   []step
	names   []string
	from    [][2]int   // calls whose first argument is an earlier call's result (HelperCall.From)
	stack   [1024]byte // the helper runs no code that uses it; clone needs one
	keep    []any
	pid     int
	started bool
}

// NewHelper returns an empty Helper on the heap. It must not be inlined,
// for the reason given at newChild.
//
//go:noinline
func NewHelper() *Helper { return new(Helper) }

// HelperCall is one system call of a helper's.
type HelperCall struct {
	Name string
	Nr   uintptr
	Args []uintptr // at most six
	// Except is an error that is no failure (EEXIST for a directory
	// that may exist); with Ignore, no result is.
	Except syscall.Errno
	Ignore bool
	// From, when above zero, makes the first argument the result of call
	// From-1 (an index Len gave before it was added): a descriptor it
	// opened.
	From int
}

// Call adds a system call; any error ends the helper.
func (h *Helper) Call(name string, nr uintptr, args ...uintptr) {
	h.Add(HelperCall{Name: name, Nr: nr, Args: args})
}

// Add adds a system call.
func (h *Helper) Add(c HelperCall) {
	if len(c.Args) > 6 {
		panic("clonexec: a system call takes at most six arguments")
	}
	s := step{nr: c.Nr, check: checkErrno}
	switch {
	case c.Ignore:
		s.check = checkNone
	case c.Except != 0:
		s.check, s.want = checkErrnoExcept, -uintptr(c.Except)
	}
	for i, p := range []*uintptr{&s.a1, &s.a2, &s.a3, &s.a4, &s.a5, &s.a6}[:len(c.Args)] {
		*p = c.Args[i]
	}
	if c.From > 0 {
		h.from = append(h.from, [2]int{len(h.steps), c.From - 1})
	}
	h.steps = append(h.steps, s)
	h.names = append(h.names, c.Name)
}

// Keep holds v (what a call's argument points into) as long as h.
func (h *Helper) Keep(v any) { h.keep = append(h.keep, v) }

// Len is the number of calls added.
func (h *Helper) Len() int { return len(h.steps) }

// finish closes the list before Start takes it: first every descriptor
// above the n the child placed, last the exit. (The descriptors are the
// parent's, copied into the child at the clone; the helper's copies would
// hold pipes open that the parent waits to see closed.)
func (h *Helper) finish(n int) {
	h.steps = append([]step{{nr: sysCloseRange, a1: uintptr(n), a2: ^uintptr(0) >> 32, check: checkErrno}}, h.steps...)
	h.names = append([]string{"close the parent's descriptors"}, h.names...)
	h.Add(HelperCall{Name: "exit", Nr: sysExitGroup, Args: []uintptr{0}, Ignore: true})
	// The steps are final: their addresses hold (one added first).
	for _, f := range h.from {
		h.steps[f[0]+1].from = uintptr(unsafe.Pointer(&h.steps[f[1]+1].result))
	}
}

// Pid is the helper's pid in the child's PID namespace (the child waits
// for it there), once Start has returned; 0 if none started (Fill said
// no).
func (h *Helper) Pid() int { return h.pid }

// Err is the call that failed in the helper, or nil: read once the helper
// has exited (its steps are written until then).
func (h *Helper) Err() error {
	for i := range h.steps {
		if s := &h.steps[i]; s.failed != 0 {
			return &StepError{Step: h.names[i], Err: syscall.Errno(-int64(s.result)), Helper: true}
		}
	}
	return nil
}
