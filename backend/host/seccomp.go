package host

import (
	"runtime"
	"slices"

	"github.com/cordon-sandbox/cordon/baseline"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// SeccompProfile renders the baseline's policy (baseline.Seccomp) for an
// OCI runtime (or Docker, whose profiles are the same JSON), which applies
// it to the agent and so to everything in the sandbox. With landlock the agent builds a Landlock ruleset for its
// commands under this filter, so landlock_create_ruleset is allowed here.
// Under a user-space kernel clone3 and openat2 are allowed: gVisor's
// sentry answers every denial of the runtime's filter EPERM (it ignores
// errnoRet), where libc needs ENOSYS to fall back, and the namespaces a
// process could make there are the sentry's own, not the host's.
//
// Commands run under this filter and under the baseline's own, compiled
// from the same policy (sandboxinit), which the agent installs on the
// thread it forks them from: that one holds what a runtime's libseccomp
// cannot say (loose, below).
func SeccompProfile(userSpaceKernel, landlock bool) *specs.LinuxSeccomp {
	p := baseline.Seccomp
	if landlock {
		p = p.With("landlock_create_ruleset")
	}
	if userSpaceKernel {
		p = p.With("clone3", "openat2")
	}
	prof, _ := RenderSeccomp(p)
	return prof
}

// RenderSeccomp is p in a runtime's terms, and the calls it allows more
// widely than p does. libseccomp lets an unconditional rule for a call
// override its conditional ones, so a call whose rules refuse some
// arguments and allow the rest (ioctl's TIOCSTI) is allowed here outright;
// each condition is a masked comparison of the argument's low 32 bits, as
// in the compiled filter; and a call's own errno when no rule holds
// (socket's EAFNOSUPPORT) is the profile's default, EPERM.
func RenderSeccomp(p baseline.Policy) (prof *specs.LinuxSeccomp, loose []string) {
	arch := map[string]specs.Arch{"amd64": specs.ArchX86_64, "arm64": specs.ArchAARCH64}[runtime.GOARCH]
	eperm := uint(baseline.Unnamed)
	rules := []specs.LinuxSyscall{{Names: slices.Sorted(slices.Values(p.Allow)), Action: specs.ActAllow}}
	for _, c := range p.Calls {
		switch {
		case len(c.Rules) == 0:
			e := uint(c.Otherwise)
			if e == 0 {
				e = eperm
			}
			rules = append(rules, specs.LinuxSyscall{Names: []string{c.Name}, Action: specs.ActErrno, ErrnoRet: &e})
		case conditionalAllows(c):
			for _, r := range c.Rules {
				var args []specs.LinuxSeccompArg
				for _, cond := range r.Conds {
					args = append(args, specs.LinuxSeccompArg{Index: uint(cond.Arg), Value: uint64(cond.Mask), ValueTwo: uint64(cond.Value), Op: specs.OpMaskedEqual})
				}
				rules = append(rules, specs.LinuxSyscall{Names: []string{c.Name}, Action: specs.ActAllow, Args: args})
			}
		default:
			rules = append(rules, specs.LinuxSyscall{Names: []string{c.Name}, Action: specs.ActAllow})
			loose = append(loose, c.Name)
		}
	}
	return &specs.LinuxSeccomp{
		DefaultAction:   specs.ActErrno,
		DefaultErrnoRet: &eperm,
		Architectures:   []specs.Arch{arch},
		Syscalls:        rules,
	}, loose
}

// conditionalAllows: every rule of c allows, each on conditions that name
// an argument at most once (libseccomp compares each once per rule).
func conditionalAllows(c baseline.Call) bool {
	for _, r := range c.Rules {
		if r.Errno != 0 || len(r.Conds) == 0 {
			return false
		}
		seen := map[int]bool{}
		for _, cond := range r.Conds {
			if seen[cond.Arg] {
				return false
			}
			seen[cond.Arg] = true
		}
	}
	return true
}
