package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// newFlagSet is a verb's flag set; usage is its synopsis and what it does,
// printed above the flags by --help.
func newFlagSet(name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "%s\n\nflags:\n", strings.TrimRight(usage, "\n"))
		printDefaults(fs)
	}
	return fs
}

// printDefaults is flag.PrintDefaults, which names the argument of a flag
// of a type of its own "value": a size or duration flag's is named so.
func printDefaults(fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		switch f.Value.(type) {
		case *sizeFlag:
			if name == "value" {
				name = "size"
			}
		case durationFlag:
			if name == "value" {
				name = "duration"
			}
		case formatFlag:
			if name == "value" {
				name = "format"
			}
		}
		line := "  -" + f.Name
		if name != "" {
			line += " " + name
		}
		if len(line) <= 4 {
			line += "\t"
		} else {
			line += "\n    \t"
		}
		line += strings.ReplaceAll(usage, "\n", "\n    \t")
		switch d := f.DefValue; {
		case d == "" || d == "0" || d == "false" || d == "0s":
		case isString(f.Value):
			line += fmt.Sprintf(" (default %q)", d)
		default:
			line += " (default " + d + ")"
		}
		fmt.Fprintln(fs.Output(), line)
	})
}

// isString reports whether v is a string flag's (whose default, as
// flag.PrintDefaults has it, is quoted).
func isString(v flag.Value) bool {
	g, ok := v.(flag.Getter)
	if !ok {
		return false
	}
	_, ok = g.Get().(string)
	return ok
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

// isSet reports whether the flag name was given on fs's command line.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// sizeFlag is a size flag, written as people write sizes (parseSize):
// 4g, 512m, 1GiB or plain bytes; "0" only where zero means something.
type sizeFlag struct {
	n      int64
	zeroOK bool
}

func (f *sizeFlag) String() string {
	if f == nil {
		return ""
	}
	return humanSize(f.n)
}

func (f *sizeFlag) Set(s string) error {
	if f.zeroOK && strings.TrimSpace(s) == "0" {
		f.n = 0
		return nil
	}
	n, err := parseSize(s)
	f.n = n
	return err
}

// size defines a size flag on fs.
func size(fs *flag.FlagSet, name string, value int64, zeroOK bool, usage string) *int64 {
	f := &sizeFlag{n: value, zeroOK: zeroOK}
	fs.Var(f, name, usage)
	return &f.n
}

// durationFlag is a duration flag: 30s, 5m, 1h30m, or a bare number of
// seconds, as timeout(1) and docker's timeouts take them (Go's own flag
// refused "5" with only "parse error").
type durationFlag struct {
	d *time.Duration
	// atLeastZero refuses a negative duration, where none means anything
	// (a timeout's: it would run with the default).
	atLeastZero bool
}

func (f durationFlag) String() string {
	if f.d == nil {
		return ""
	}
	return f.d.String()
}

func (f durationFlag) Set(s string) error {
	t := strings.TrimSpace(s)
	d, err := time.ParseDuration(t)
	if n, ferr := strconv.ParseFloat(t, 64); ferr == nil && math.Abs(n) < float64(math.MaxInt64/int64(time.Second)) {
		d, err = time.Duration(n*float64(time.Second)), nil
	}
	if err != nil {
		return fmt.Errorf("%q is not a duration like 30s, 5m or 1h30m (a bare number is seconds)", s)
	}
	if d < 0 && f.atLeastZero {
		return fmt.Errorf("%q: a duration of 0 or more", s)
	}
	*f.d = d
	return nil
}

// timeoutFlag defines a command's --timeout on fs: a duration of 0 or
// more.
func timeoutFlag(fs *flag.FlagSet, usage string) *time.Duration {
	var d time.Duration
	fs.Var(durationFlag{d: &d, atLeastZero: true}, "timeout", usage)
	return &d
}

// duration defines a duration flag on fs.
func duration(fs *flag.FlagSet, name string, value time.Duration, usage string) *time.Duration {
	d := value
	fs.Var(durationFlag{d: &d}, name, usage)
	return &d
}

// formatFlag is -o: json, or without it text. (A string flag took "-o
// yaml" and printed the table.)
type formatFlag struct{ s *string }

func (f formatFlag) String() string {
	if f.s == nil {
		return ""
	}
	return *f.s
}

func (f formatFlag) Set(v string) error {
	if v != "json" {
		return fmt.Errorf("%q: the output format is json, or without -o text", v)
	}
	*f.s = v
	return nil
}

// outputFormat defines -o on fs.
func outputFormat(fs *flag.FlagSet, usage string) *string {
	s := new(string)
	fs.Var(formatFlag{s}, "o", usage)
	return s
}
