package sandboxinit

import (
	"runtime"
	"slices"
	"testing"

	"github.com/cordon-sandbox/cordon/baseline"
)

// TestCompiledFilter: the filter a sandbox's init loads, compiled when the
// agent was built (filter_linux_ARCH.go), is the baseline's policy compiled
// now, instruction for instruction. scripts/test runs it on arm64 too, in
// user-mode emulation; an architecture the baseline has no filter for has
// no table either.
func TestCompiledFilter(t *testing.T) {
	if _, ok := baseline.Arches[runtime.GOARCH]; !ok {
		if compiledFilter != nil {
			t.Errorf("%s has a compiled filter but the baseline compiles none for it", runtime.GOARCH)
		}
		return
	}
	want, err := compileFilter()
	if err != nil {
		t.Fatal(err)
	}
	if len(compiledFilter) == 0 || !slices.Equal(compiledFilter, want) {
		t.Errorf("%s: filter_linux_%s.go is not baseline.Seccomp (%d instructions against %d): run go generate ./agent/sandboxinit", runtime.GOARCH, runtime.GOARCH, len(compiledFilter), len(want))
	}
}
