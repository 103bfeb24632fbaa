package main

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/cordon-sandbox/cordon/internal/printable"
)

// removeEach deletes each name with del, stopping at the first failure.
func removeEach(usage string, names []string, del func(string) error) int {
	if len(names) == 0 {
		fmt.Fprintln(os.Stderr, usage)
		return 2
	}
	for _, n := range names {
		if err := del(n); err != nil {
			return apiFail(err)
		}
	}
	return 0
}

// listOut prints a list the daemon answered, as JSON (-o json) or as a
// table with header, each item's cells from row.
func listOut[T any](items []T, err error, output, header string, row func(T) []any) int {
	if err != nil {
		return apiFail(err)
	}
	if output == "json" {
		return printJSON(items)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, it := range items {
		cells := row(it)
		for i, c := range cells {
			if i > 0 {
				fmt.Fprint(tw, "\t")
			}
			fmt.Fprint(tw, printable.String(fmt.Sprint(c)))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	return 0
}

// subcommandOf checks `cordon VERB SUB ...` (args beginning at SUB):
// ok when SUB is one of subs; otherwise it says what there is to say, the
// usage on standard output for a request of help (status 0), else on
// standard error with the subcommands named (status 2).
func subcommandOf(verb string, args []string, usage string, subs ...string) (code int, ok bool) {
	switch {
	case len(args) == 0:
		fmt.Fprintln(os.Stderr, usage)
		return 2, false
	case isHelp(args[0]):
		fmt.Println(usage)
		return 0, false
	case !slices.Contains(subs, args[0]):
		fmt.Fprintf(os.Stderr, "cordon %s: no subcommand %q; there are %s (cordon %s --help shows them)\n", verb, args[0], strings.Join(subs, ", "), verb)
		return 2, false
	}
	return 0, true
}

// isHelp reports whether a is a request of help.
func isHelp(a string) bool { return a == "-h" || a == "-help" || a == "--help" || a == "help" }

// subcommandFlags is the flag set of `cordon VERB SUB`, args beginning at
// SUB, one of subs; nil, with code to exit with, otherwise (subcommandOf).
func subcommandFlags(verb string, args []string, usage string, subs ...string) (*flag.FlagSet, int) {
	if code, ok := subcommandOf(verb, args, usage, subs...); !ok {
		return nil, code
	}
	return newFlagSet(verb+" "+args[0], usage), 0
}
