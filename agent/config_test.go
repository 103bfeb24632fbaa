package agent_test

import (
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/agent"
)

// TestSpareThreadsSetting: the spare-thread count defaults to
// ReserveThreads, takes 0 (none, for a sandbox without a pids limit) up to
// MaxSpareThreads, and refuses anything else with the variable's name.
func TestSpareThreadsSetting(t *testing.T) {
	base := []string{"CORDON_AGENT_SOCKET=/tmp/x.sock"}
	cfg, err := agent.FromEnv(base)
	if err != nil || cfg.SpareThreads != agent.ReserveThreads {
		t.Fatalf("default: %d %v", cfg.SpareThreads, err)
	}
	for v, want := range map[string]int{"0": 0, "64": 64, "256": 256} {
		cfg, err := agent.FromEnv(append(base, "CORDON_AGENT_SPARE_THREADS="+v))
		if err != nil || cfg.SpareThreads != want {
			t.Errorf("%s: %d %v", v, cfg.SpareThreads, err)
		}
	}
	for _, v := range []string{"-1", "1.5", "257", "many"} {
		if _, err := agent.FromEnv(append(base, "CORDON_AGENT_SPARE_THREADS="+v)); err == nil || !strings.Contains(err.Error(), "SPARE_THREADS") {
			t.Errorf("%s: %v, want a refusal naming the variable", v, err)
		}
	}
}
