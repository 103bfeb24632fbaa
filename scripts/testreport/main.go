// Command testreport reads `go test -json` on standard input and writes
// what a plain `go test` writes (each package's line, and the whole output
// of every test that failed), then every test that was skipped, with its
// reason, so that no run skips anything silently. It exits 1 if anything
// failed, and, given a file of expected skips (-expect, read under CI), if
// any test skipped that the file does not declare.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
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
	expectFile := flag.String("expect", "", "a file of the skips expected on this machine (see .ci/skips); any other fails the run")
	flag.Parse()
	var expected []expectation
	if *expectFile != "" {
		var err error
		if expected, err = readExpected(*expectFile); err != nil {
			fmt.Fprintln(os.Stderr, "testreport:", err)
			os.Exit(2)
		}
	}
	if report(os.Stdin, os.Stdout, *expectFile, expected) {
		os.Exit(1)
	}
}

// report reads the events from r and writes the report to w; it says
// whether the run failed. With expectFile, every skip must be among
// expected.
func report(r io.Reader, w io.Writer, expectFile string, expected []expectation) (failed bool) {
	out := bufio.NewWriter(w)
	defer out.Flush()
	held := map[string][]string{} // package + test -> its output so far
	var skips []skip
	in := bufio.NewScanner(r)
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
	var undeclared []skip
	for _, s := range skips {
		pkg := strings.TrimPrefix(s.pkg, "github.com/cordon-sandbox/cordon/")
		mark := ""
		if expectFile != "" && !declared(expected, pkg, s.test) {
			undeclared = append(undeclared, s)
			mark = " [NOT DECLARED]"
		}
		fmt.Fprintf(out, "  %s %s: %s%s\n", pkg, s.test, s.why, mark)
	}
	if len(undeclared) > 0 {
		fmt.Fprintf(out, "\nFAIL: %d skips are not declared expected in %s: a missing prerequisite is a failure here (install it, or declare the skip with its reason)\n", len(undeclared), expectFile)
		failed = true
	}
	return failed
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

// expectation is one declared skip: a package and a pattern of test names.
type expectation struct {
	pkg  string
	test *regexp.Regexp
}

// readExpected reads a file of declared skips: "package pattern reason"
// a line, # comments and blank lines ignored; every entry must give its
// reason.
func readExpected(path string) ([]expectation, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []expectation
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 3 {
			return nil, fmt.Errorf("%s:%d: want a package, a test pattern and the reason", path, i+1)
		}
		re, err := regexp.Compile(f[1])
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %v", path, i+1, err)
		}
		out = append(out, expectation{f[0], re})
	}
	return out, nil
}

func declared(expected []expectation, pkg, test string) bool {
	for _, e := range expected {
		if e.pkg == pkg && e.test.MatchString(test) {
			return true
		}
	}
	return false
}
