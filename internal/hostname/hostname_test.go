package hostname

import (
	"strings"
	"testing"
)

func TestValid(t *testing.T) {
	for name, want := range map[string]bool{
		"a.test": true, "Registry.Example.test": true, "xn--bcher-kva.example": true, "localhost": true, "a-b.test": true,
		"": false, "..": false, "a..test": false, ".a.test": false, "a.test.": false, "-a.test": false, "a-.test": false,
		"a_b.test": false, "a b.test": false, "a!.test": false,
		strings.Repeat("a", 63) + ".test": true, strings.Repeat("a", 64) + ".test": false,
		strings.Repeat("a.", 126) + "a": true, strings.Repeat("a.", 126) + "ab": false,
	} {
		if got := Valid(name); got != want {
			t.Errorf("Valid(%q) = %v, want %v", name, got, want)
		}
	}
}
