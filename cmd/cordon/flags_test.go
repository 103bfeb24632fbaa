package main

import (
	"slices"
	"testing"
)

// TestCombinedShort: -it is -i -t where both are switches; anything else
// (a flag taking a value, an unknown letter, what follows the first
// argument or "--") is left as it is.
func TestCombinedShort(t *testing.T) {
	fs := newFlagSet("x", "")
	fs.Bool("i", false, "")
	fs.Bool("t", false, "")
	outputFormat(fs, "")
	for _, c := range []struct{ in, want []string }{
		{[]string{"-it", "ID"}, []string{"-i", "-t", "ID"}},
		{[]string{"-ti", "--", "-it"}, []string{"-t", "-i", "--", "-it"}},
		{[]string{"-io", "json"}, []string{"-io", "json"}},
		{[]string{"-ix"}, []string{"-ix"}},
		{[]string{"ID", "-it"}, []string{"ID", "-it"}},
		{[]string{"-i=true"}, []string{"-i=true"}},
	} {
		if got := combinedShort(fs, c.in); !slices.Equal(got, c.want) {
			t.Errorf("%q: got %q, want %q", c.in, got, c.want)
		}
	}
}

// TestVerbsListed: every verb is in the usage's order, once.
func TestVerbsListed(t *testing.T) {
	seen := map[string]bool{}
	for _, v := range verbOrder {
		if _, ok := verbs[v]; !ok || seen[v] {
			t.Errorf("verbOrder names %q, which is not a verb or is named twice", v)
		}
		seen[v] = true
	}
	for v := range verbs {
		if !seen[v] {
			t.Errorf("verb %q is missing from the usage", v)
		}
	}
}

// TestCombinedShortAfterLongFlags: switches combine after long flags and
// flag values, as they are typed (cordon exec --host X -dt --name N ID).
func TestCombinedShortAfterLongFlags(t *testing.T) {
	fs := newFlagSet("x", "")
	fs.Bool("d", false, "")
	fs.Bool("t", false, "")
	fs.String("host", "", "")
	fs.String("name", "", "")
	in := []string{"--host=unix:///s", "-dt", "--name", "-n", "ID", "-it"}
	want := []string{"--host=unix:///s", "-d", "-t", "--name", "-n", "ID", "-it"}
	if got := combinedShort(fs, in); !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	in = []string{"--host", "unix:///s", "-td", "ID"}
	want = []string{"--host", "unix:///s", "-t", "-d", "ID"}
	if got := combinedShort(fs, in); !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}
