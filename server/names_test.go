package server

import (
	"strings"
	"testing"
)

func TestValidName(t *testing.T) {
	for _, c := range []struct {
		name  string
		max   int
		upper bool
		ok    bool
	}{
		{"a", 63, false, true},
		{"pool-1.x_y", 63, false, true},
		{"0abc", 63, false, true},
		{"Pool", 63, false, false},
		{"Tenant", 64, true, true},
		{"", 63, false, false},
		{"-a", 63, false, false},
		{".a", 64, true, false},
		{"a/b", 64, true, false},
		{"a b", 64, true, false},
		{"é", 64, true, false},
		{"a" + strings.Repeat("b", 62), 63, false, true},
		{"a" + strings.Repeat("b", 63), 63, false, false},
		{"a" + strings.Repeat("b", 63), 64, true, true},
	} {
		if got := validName(c.name, c.max, c.upper); got != c.ok {
			t.Errorf("validName(%q, %d, %v) = %v", c.name, c.max, c.upper, got)
		}
	}
}

func TestBearerSecret(t *testing.T) {
	for h, want := range map[string]string{
		"Bearer abc":    "abc",
		"bearer  abc d": "abc d",
		"BEARER x":      "x",
		"Bearer ":       "",
		"Bearer   ":     "",
		"Bearerabc":     "",
		"Basic abc":     "",
		"Bear":          "",
	} {
		got, ok := bearerSecret(h)
		if got != want || ok != (want != "") {
			t.Errorf("bearerSecret(%q) = %q, %v", h, got, ok)
		}
	}
}
