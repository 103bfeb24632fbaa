package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const events = `{"Action":"run","Package":"m/p","Test":"TestA"}
{"Action":"output","Package":"m/p","Test":"TestA","Output":"    a_test.go:9: needs runsc\n"}
{"Action":"skip","Package":"m/p","Test":"TestA"}
{"Action":"run","Package":"m/p","Test":"TestB"}
{"Action":"pass","Package":"m/p","Test":"TestB"}
`

// TestUndeclaredSkipFails: with a file of expected skips, a skip it does
// not declare fails the run and is marked; one it declares passes; without
// the file (a local run) skips are listed and pass.
func TestUndeclaredSkipFails(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	other := write("other", "# comment\n\nm/p ^TestZ$ some other reason\n")
	match := write("match", "m/p ^TestA$ runsc is not on this machine\n")
	for _, c := range []struct {
		name, file string
		fails      bool
		mark       bool
	}{
		{"undeclared", other, true, true},
		{"declared", match, false, false},
		{"no file", "", false, false},
	} {
		var expected []expectation
		if c.file != "" {
			var err error
			if expected, err = readExpected(c.file); err != nil {
				t.Fatal(err)
			}
		}
		var out strings.Builder
		failed := report(strings.NewReader(events), &out, c.file, expected)
		if failed != c.fails || strings.Contains(out.String(), "NOT DECLARED") != c.mark || !strings.Contains(out.String(), "TestA: a_test.go:9: needs runsc") {
			t.Errorf("%s: failed %v, report:\n%s", c.name, failed, out.String())
		}
	}
	if _, err := readExpected(write("bad", "m/p ^TestA$\n")); err == nil {
		t.Error("a declared skip without its reason was accepted")
	}
}
