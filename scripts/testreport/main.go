// Command testreport reads `go test -json` on standard input and writes
// what a plain `go test` writes (each package's line, and the whole output
// of every test that failed), then every test that was skipped, with its
// reason, so that no run skips anything silently. It exits 1 if anything
// failed.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
)

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

type skip struct{ pkg, test, why string }

func main() {
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	held := map[string][]string{} // package + test -> its output so far
	var skips []skip
	failed := false
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	for in.Scan() {
		var e event
		if err := json.Unmarshal(in.Bytes(), &e); err != nil {
			// Not an event (a build error, say): pass it on.
			fmt.Fprintln(out, in.Text())
			continue
		}
		key := e.Package + " " + e.Test
		switch e.Action {
		case "output":
			if e.Test == "" {
				if !strings.HasPrefix(e.Output, "=== ") && e.Output != "PASS\n" {
					out.WriteString(e.Output)
				}
				continue
			}
			held[key] = append(held[key], e.Output)
		case "fail":
			failed = true
			if e.Test != "" {
				out.WriteString(strings.Join(held[key], ""))
			}
			delete(held, key)
		case "skip":
			if e.Test != "" {
				skips = append(skips, skip{e.Package, e.Test, reason(held[key])})
			}
			delete(held, key)
		case "pass":
			delete(held, key)
		}
		out.Flush()
	}
	sort.Slice(skips, func(i, j int) bool {
		return skips[i].pkg+" "+skips[i].test < skips[j].pkg+" "+skips[j].test
	})
	fmt.Fprintf(out, "\nskipped: %d tests\n", len(skips))
	for _, s := range skips {
		fmt.Fprintf(out, "  %s %s: %s\n", strings.TrimPrefix(s.pkg, "github.com/cordon-sandbox/cordon/"), s.test, s.why)
	}
	if failed {
		out.Flush()
		os.Exit(1)
	}
}

// reason is what a skipped test said, without the test runner's headers.
func reason(lines []string) string {
	var said []string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		said = append(said, t)
	}
	if len(said) == 0 {
		return "(no reason given)"
	}
	return strings.Join(said, " ")
}
