//go:build linux

package oci

import (
	"slices"
	"testing"

	"github.com/cordon-sandbox/cordon/backend/host"
	"github.com/cordon-sandbox/cordon/baseline"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// ociAllows is whether prof allows call name with args, as libseccomp
// reads a profile: an unconditional rule for the call wins; otherwise the
// first conditional rule whose comparisons all hold (64-bit, as libseccomp
// compares on a 64-bit architecture); otherwise the default.
func ociAllows(prof *specs.LinuxSeccomp, name string, args []uint64) bool {
	var conditional []specs.LinuxSyscall
	for _, r := range prof.Syscalls {
		if !slices.Contains(r.Names, name) {
			continue
		}
		if len(r.Args) == 0 {
			return r.Action == specs.ActAllow
		}
		conditional = append(conditional, r)
	}
	for _, r := range conditional {
		holds := true
		for _, a := range r.Args {
			if a.Op != specs.OpMaskedEqual {
				return false
			}
			holds = holds && args[a.Index]&a.Value == a.ValueTwo
		}
		if holds {
			return r.Action == specs.ActAllow
		}
	}
	return prof.DefaultAction == specs.ActAllow
}

// TestSeccompRendersPolicy: the bundle's profile allows a call exactly
// when the compiled filter does, for every call the policy names and the
// argument values its rules test (with bits above the low 32 set, too),
// except calls it reports as loose, where it may only allow more; and
// every call the policy does not name is left to the default, refused.
func TestSeccompRendersPolicy(t *testing.T) {
	arch := baseline.Arches["amd64"]
	raw, err := baseline.Seccomp.Compile(arch)
	if err != nil {
		t.Fatal(err)
	}
	in, err := baseline.NewInterpreter(raw)
	if err != nil {
		t.Fatal(err)
	}
	filterAllows := func(name string, args []uint64) bool {
		nr, ok := arch.Number(name)
		if !ok {
			t.Fatalf("no call %s", name)
		}
		ret, err := in.Decide(arch.Audit, nr, args...)
		if err != nil {
			t.Fatal(err)
		}
		return ret == baseline.RetAllow
	}
	prof, loose := host.RenderSeccomp(baseline.Seccomp)
	if !slices.Equal(loose, []string{"ioctl"}) {
		t.Errorf("loose calls %v, want only ioctl (whose refusals libseccomp cannot put before its allowance)", loose)
	}
	if prof.DefaultAction != specs.ActErrno {
		t.Fatalf("default action %s, want a refusal", prof.DefaultAction)
	}
	values := []uint64{0}
	for _, c := range baseline.Seccomp.Calls {
		for _, r := range c.Rules {
			for _, cond := range r.Conds {
				values = append(values, uint64(cond.Value), uint64(cond.Mask), uint64(cond.Mask&^cond.Value))
			}
		}
	}
	for _, c := range baseline.Seccomp.Calls {
		if _, ok := arch.Number(c.Name); !ok {
			continue
		}
		checked, allowed := 0, 0
		var union uint32
		for _, r := range c.Rules {
			for _, cond := range r.Conds {
				union |= cond.Mask
			}
		}
		for _, high := range []uint64{0, 1 << 32} {
			// Every argument at once: a rule on two (a creating open's
			// flags and its mode).
			args := []uint64{uint64(union) | high, uint64(union) | high, uint64(union) | high, uint64(union) | high, 0, 0}
			f, o := filterAllows(c.Name, args), ociAllows(prof, c.Name, args)
			if f != o && !(o && slices.Contains(loose, c.Name)) {
				t.Errorf("%s%v: the filter allows it: %v; the profile: %v", c.Name, args, f, o)
			}
			checked++
			if f {
				allowed++
			}
		}
		for _, v := range values {
			for _, high := range []uint64{0, 1 << 32} {
				for arg := range 4 {
					args := make([]uint64, 6)
					args[arg] = v | high
					if arg == 2 && c.Name == "socket" {
						args[0] = 16 // netlink, with each protocol
					}
					f, o := filterAllows(c.Name, args), ociAllows(prof, c.Name, args)
					checked++
					if f {
						allowed++
					}
					if f != o && !(o && slices.Contains(loose, c.Name)) {
						t.Errorf("%s%v: the filter allows it: %v; the profile: %v", c.Name, args, f, o)
					}
				}
			}
		}
		if len(c.Rules) > 0 && (allowed == 0 || allowed == checked) {
			t.Errorf("%s: allowed %d of %d argument sets: the values tried do not reach its rules", c.Name, allowed, checked)
		}
	}
	for _, name := range baseline.Seccomp.Allow {
		if !ociAllows(prof, name, make([]uint64, 6)) {
			t.Errorf("%s: refused by the profile", name)
		}
	}
	for _, name := range []string{"mount", "unshare", "ptrace", "io_uring_setup", "keyctl", "bpf"} {
		if ociAllows(prof, name, make([]uint64, 6)) {
			t.Errorf("%s: allowed by the profile", name)
		}
	}
}
