package main

import (
	"flag"
	"fmt"
	"github.com/cordon-sandbox/cordon/internal/printable"
	"os"
	"text/tabwriter"
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

// subcommandFlags is the flag set of `cordon VERB SUB`, args beginning at
// SUB; nil, with the usage said, when no SUB is given.
func subcommandFlags(verb string, args []string, usage string) *flag.FlagSet {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, usage)
		return nil
	}
	return newFlagSet(verb+" "+args[0], usage)
}
