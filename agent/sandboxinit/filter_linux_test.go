package sandboxinit

import (
	"slices"
	"testing"

	"github.com/cordon-sandbox/cordon/baseline"
)

// TestCompiledFilter: the filter a sandbox's init loads, compiled when the
// agent was built (filter_linux.go), is the baseline's policy compiled now,
// instruction for instruction, for every architecture.
func TestCompiledFilter(t *testing.T) {
	for arch := range baseline.Arches {
		want, err := compileFilter(arch)
		if err != nil {
			t.Fatal(err)
		}
		got := compiledFilter(arch)
		if len(got) == 0 || !slices.Equal(got, want) {
			t.Errorf("%s: filter_linux.go is not baseline.Seccomp (%d instructions against %d): run go generate ./agent/sandboxinit", arch, len(got), len(want))
		}
	}
}
