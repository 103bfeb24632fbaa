package baseline_test

import (
	"runtime"
	"testing"

	"github.com/cordon-sandbox/cordon/baseline"
)

// BenchmarkFilterCompile is what every sandbox start pays to compile the
// filter (the agent compiles it before it installs it).
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
