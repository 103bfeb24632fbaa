package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// newFlagSet is a verb's flag set; usage is its synopsis and what it does,
// printed above the flags by --help.
func newFlagSet(name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "%s\n\nflags:\n", strings.TrimRight(usage, "\n"))
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses a verb's flags: --help prints its usage on standard
// output (ok false, code 0), a flag it does not know one line naming
// --help on standard error (ok false, code 2).
func parseFlags(fs *flag.FlagSet, args []string) (code int, ok bool) {
	fs.SetOutput(io.Discard) // the flag package's own account is the whole usage
	err := fs.Parse(combinedShort(fs, args))
	fs.SetOutput(os.Stderr)
	switch {
	case err == nil:
		return 0, true
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(os.Stdout)
		fs.Usage()
		fs.SetOutput(os.Stderr)
		return 0, false
	}
	fmt.Fprintf(os.Stderr, "cordon %s: %v (cordon %s --help shows its flags)\n", fs.Name(), err, fs.Name())
	return 2, false
}

// parseInterspersed is parseFlags for a verb whose flags may follow its
// arguments (cordon image import FILE --name X); it returns the arguments.
// What follows a "--" is arguments, "--" included (cordon exec ID -- CMD).
func parseInterspersed(fs *flag.FlagSet, args []string) (rest []string, code int, ok bool) {
	var tail []string
	if i := slices.Index(args, "--"); i >= 0 {
		args, tail = args[:i], args[i:]
	}
	defer func() { rest = append(rest, tail...) }()
	for {
		if code, ok := parseFlags(fs, args); !ok {
			return nil, code, false
		}
		args = fs.Args()
		if len(args) == 0 {
			return rest, 0, true
		}
		rest = append(rest, args[0])
		args = args[1:]
	}
}

// combinedShort spells out combined one-letter switches (-it is -i -t), as
// docker's users type them, where every letter is a boolean flag of fs. It
// reads flags as the flag package does (a flag's value may be the next
// argument) and stops at the first argument that is not a flag, or "--".
func combinedShort(fs *flag.FlagSet, args []string) []string {
	isBool := func(name string) bool {
		f := fs.Lookup(name)
		if f == nil {
			return false
		}
		b, ok := f.Value.(interface{ IsBoolFlag() bool })
		return ok && b.IsBoolFlag()
	}
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") || a == "-" {
			return append(out, args[i:]...)
		}
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			out = append(out, a)
			continue
		}
		if !strings.HasPrefix(a, "--") && len(name) > 1 && fs.Lookup(name) == nil {
			all := true
			for _, r := range name {
				all = all && isBool(string(r))
			}
			if all {
				for _, r := range name {
					out = append(out, "-"+string(r))
				}
				continue
			}
		}
		out = append(out, a)
		if f := fs.Lookup(name); f != nil && !isBool(name) && i+1 < len(args) {
			// Its value is the next argument.
			i++
			out = append(out, args[i])
		}
	}
	return out
}
