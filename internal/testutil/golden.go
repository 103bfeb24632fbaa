package testutil

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// Golden compares v, as indented JSON, with the file at path, which
// update rewrites first (a test's -update flag): a pinned rendering that
// changes fails until the change is made on purpose and its diff read.
func Golden(t testing.TB, path string, v any, update bool) {
	t.Helper()
	got, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if update {
		if err := os.WriteFile(path, append(got, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(want)) != string(got) {
		t.Errorf("%s changed; if on purpose, run %s with -update and read the diff:\n%s", path, t.Name(), got)
	}
}
