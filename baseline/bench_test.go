package baseline_test

import (
	"runtime"
	"testing"

	"github.com/cordon-sandbox/cordon/baseline"
)

// BenchmarkFilterCompile is what compiling the filter costs: what every
// sandbox start paid before the agent took it compiled at build time
// (agent/sandboxinit/filter_linux_ARCH.go).
func BenchmarkFilterCompile(b *testing.B) {
	arch, ok := baseline.Arches[runtime.GOARCH]
	if !ok {
		b.Skipf("no filter for %s", runtime.GOARCH)
	}
	for b.Loop() {
		if _, err := baseline.Seccomp.Compile(arch); err != nil {
			b.Fatal(err)
		}
	}
}
