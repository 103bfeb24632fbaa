//go:build !cordon_light

package main

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/cordon-sandbox/cordon/sandbox"
)

// tiersCmd lists the tiers this host offers, each available or why not,
// with what each can enforce.
func tiersCmd(args []string) int {
	fs := newFlagSet("tiers", "usage: cordon tiers\n\nLists the isolation tiers, whether this host can run each (and why not),\nand what each enforces.")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIER\tAVAILABLE\tENFORCES\tNOTES")
	for _, b := range backends("", nil) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := b.Probe(ctx)
		cancel()
		avail, notes := "yes", ""
		if err != nil {
			avail, notes = "no", err.Error()
		} else if d, ok := b.(interface{ Detail() string }); ok {
			notes = d.Detail()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", b.Name(), avail, enforces(b.Capabilities()), notes)
	}
	tw.Flush()
	return 0
}

// enforces names what caps can enforce.
func enforces(c sandbox.Capabilities) string {
	var out string
	for _, f := range []struct {
		on   bool
		name string
	}{{c.MemoryLimit, "memory"}, {c.PidsLimit, "pids"}, {c.CPULimit, "cpu"}, {c.DiskLimit, "disk"}, {c.Egress, "egress"}, {c.PersistentWorkspace || c.Disk, "persistent"}} {
		if f.on {
			if out != "" {
				out += ","
			}
			out += f.name
		}
	}
	if out == "" {
		return "-"
	}
	return out
}
