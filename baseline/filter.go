package baseline

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/net/bpf"
)

// Arch is an architecture the policy is compiled for.
type Arch struct {
	Name  string // as GOARCH names it
	Audit uint32 // its AUDIT_ARCH_ value, which seccomp_data carries
	// X32Bit marks x86-64's x32 calls, which share its audit value.
	X32Bit  uint32
	numbers []sysnum // sorted by name
}

// sysnum is a call's name and number.
type sysnum struct {
	name string
	nr   uint32
}

// Arches are the architectures the filter is compiled for.
var Arches = map[string]Arch{
	"amd64": {Name: "amd64", Audit: 0xc000003e, X32Bit: 0x40000000, numbers: sysnumAMD64},
	"arm64": {Name: "arm64", Audit: 0xc00000b7, numbers: sysnumARM64},
}

// Number is name's call number on a; false where a has no such call.
func (a Arch) Number(name string) (uint32, bool) {
	i, ok := slices.BinarySearchFunc(a.numbers, name, func(s sysnum, name string) int { return strings.Compare(s.name, name) })
	if !ok {
		return 0, false
	}
	return a.numbers[i].nr, true
}

// Return values of a seccomp filter.
const (
	RetAllow       = 0x7fff0000 // SECCOMP_RET_ALLOW
	RetKillProcess = 0x80000000 // SECCOMP_RET_KILL_PROCESS
	retErrno       = 0x00050000 // SECCOMP_RET_ERRNO
)

// RetErrno is the return value that fails a call with e.
func RetErrno(e syscall.Errno) uint32 { return retErrno | uint32(e)&0xffff }

// Offsets in struct seccomp_data; an argument's low 32 bits come first on
// both architectures (little-endian).
const (
	offNr   = 0
	offArch = 4
	offArgs = 16
)

// Unnamed is the errno of a call below the newest the policy names that it
// does not allow; a call above it answers ENOSYS (Newest).
const Unnamed = syscall.EPERM

// Newest is the highest call number p names on a. A call above it is one
// the policy was written without knowing: it answers ENOSYS, as on a
// kernel without it, so that a program falls back (runc does the same).
func (p Policy) Newest(a Arch) uint32 {
	var top uint32
	for _, n := range p.names() {
		if nr, ok := a.Number(n); ok && nr > top {
			top = nr
		}
	}
	return top
}

func (p Policy) names() []string {
	names := slices.Clone(p.Allow)
	for _, c := range p.Calls {
		names = append(names, c.Name)
	}
	return names
}

// Check reports a policy that names a call twice, or names a rule's
// argument out of range.
func (p Policy) Check() error {
	seen := map[string]bool{}
	for _, n := range p.names() {
		if seen[n] {
			return fmt.Errorf("seccomp policy: %s is named twice", n)
		}
		seen[n] = true
	}
	for _, c := range p.Calls {
		for _, r := range c.Rules {
			for _, cond := range r.Conds {
				if cond.Arg < 0 || cond.Arg > 5 {
					return fmt.Errorf("seccomp policy: %s: argument %d (want 0 to 5)", c.Name, cond.Arg)
				}
			}
		}
	}
	return nil
}

// Compile assembles p, which must pass Check (its tests see to that), for
// a as a classic BPF program: the architecture
// checked, then a binary search over the named calls' numbers, each
// leading to its action or to its rules.
func (p Policy) Compile(a Arch) ([]bpf.RawInstruction, error) {
	if a.numbers == nil {
		return nil, fmt.Errorf("no seccomp filter is compiled for %q (only amd64 and arm64)", a.Name)
	}
	as := assembler{ins: make([]bpf.RawInstruction, 0, 1024)}
	allow, deny, nosys := as.newLabel(), as.newLabel(), as.newLabel()

	type entry struct {
		nr     uint32
		target label
	}
	entries := make([]entry, 0, len(p.Allow)+len(p.Calls))
	for _, n := range p.Allow {
		if nr, ok := a.Number(n); ok {
			entries = append(entries, entry{nr, allow})
		}
	}
	blocks := map[label]Call{}
	for _, c := range p.Calls {
		if nr, ok := a.Number(c.Name); ok {
			l := as.newLabel()
			blocks[l] = c
			entries = append(entries, entry{nr, l})
		}
	}
	slices.SortFunc(entries, func(a, b entry) int { return cmp.Compare(a.nr, b.nr) })

	// A call of another architecture means another call by its number.
	as.add(bpf.LoadAbsolute{Off: offArch, Size: 4}.Assemble())
	as.add(bpf.JumpIf{Cond: bpf.JumpEqual, Val: a.Audit, SkipTrue: 1}.Assemble())
	as.add(bpf.RetConstant{Val: RetKillProcess}.Assemble())
	as.add(bpf.LoadAbsolute{Off: offNr, Size: 4}.Assemble())
	if a.X32Bit != 0 {
		as.jumpIf(bpf.JumpGreaterOrEqual, a.X32Bit, deny)
	}
	if len(entries) > 0 {
		as.jumpIf(bpf.JumpGreaterThan, entries[len(entries)-1].nr, nosys)
	}

	// The accumulator holds the call's number throughout the search.
	var search func(es []entry)
	search = func(es []entry) {
		if len(es) <= 4 {
			for _, e := range es {
				as.jumpIf(bpf.JumpEqual, e.nr, e.target)
			}
			as.jump(deny)
			return
		}
		mid := len(es) / 2
		upper := as.newLabel()
		as.jumpIf(bpf.JumpGreaterOrEqual, es[mid].nr, upper)
		search(es[:mid])
		as.mark(upper)
		search(es[mid:])
	}
	search(entries)

	for _, e := range entries {
		c, ok := blocks[e.target]
		if !ok {
			continue
		}
		as.mark(e.target)
		for _, r := range c.Rules {
			next := as.newLabel()
			for _, cond := range r.Conds {
				as.add(bpf.LoadAbsolute{Off: uint32(offArgs + 8*cond.Arg), Size: 4}.Assemble())
				if cond.Mask != ^uint32(0) {
					as.add(bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: cond.Mask}.Assemble())
				}
				as.jumpIf(bpf.JumpNotEqual, cond.Value, next)
			}
			as.ret(r.Errno)
			as.mark(next)
		}
		as.ret(cmpErrno(c.Otherwise))
	}
	as.mark(allow)
	as.add(bpf.RetConstant{Val: RetAllow}.Assemble())
	as.mark(deny)
	as.add(bpf.RetConstant{Val: RetErrno(Unnamed)}.Assemble())
	as.mark(nosys)
	as.add(bpf.RetConstant{Val: RetErrno(syscall.ENOSYS)}.Assemble())
	return as.assemble()
}

func cmpErrno(e syscall.Errno) syscall.Errno {
	if e == 0 {
		return Unnamed
	}
	return e
}

// assembler lays out instructions with forward jumps to labels. A jump to
// a label is a conditional jump over an unconditional one, whose offset
// has 32 bits where a conditional jump's has 8.
type assembler struct {
	ins    []bpf.RawInstruction
	err    error
	at     []int   // each label's instruction index, -1 until marked
	fixups []fixup // the jumps to labels
}

// fixup is a bpf.Jump at instruction at, to label to.
type fixup struct {
	at int
	to label
}

type label int

func (as *assembler) newLabel() label {
	as.at = append(as.at, -1)
	return label(len(as.at) - 1)
}

func (as *assembler) mark(l label) { as.at[l] = len(as.ins) }

// add appends an assembled instruction (bpf.X{...}.Assemble()).
func (as *assembler) add(i bpf.RawInstruction, err error) {
	if err != nil && as.err == nil {
		as.err = err
	}
	as.ins = append(as.ins, i)
}

func (as *assembler) jump(l label) {
	as.fixups = append(as.fixups, fixup{len(as.ins), l})
	as.add(bpf.Jump{}.Assemble())
}

// jumpIf jumps to l when the accumulator compares true with v.
func (as *assembler) jumpIf(cond bpf.JumpTest, v uint32, l label) {
	as.add(bpf.JumpIf{Cond: cond, Val: v, SkipFalse: 1}.Assemble())
	as.jump(l)
}

func (as *assembler) ret(e syscall.Errno) {
	if e == 0 {
		as.add(bpf.RetConstant{Val: RetAllow}.Assemble())
		return
	}
	as.add(bpf.RetConstant{Val: RetErrno(e)}.Assemble())
}

func (as *assembler) assemble() ([]bpf.RawInstruction, error) {
	for _, f := range as.fixups {
		i, l := f.at, f.to
		to := as.at[l]
		if to <= i {
			return nil, fmt.Errorf("seccomp filter: label %d is not ahead of its jump", l)
		}
		as.ins[i], _ = bpf.Jump{Skip: uint32(to - i - 1)}.Assemble()
	}
	if as.err != nil {
		return nil, fmt.Errorf("seccomp filter: %w", as.err)
	}
	if len(as.ins) > 4096 {
		return nil, fmt.Errorf("seccomp filter: %d instructions (the kernel takes 4096)", len(as.ins))
	}
	return as.ins, nil
}
