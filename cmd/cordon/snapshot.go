package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cordon-sandbox/cordon/server/api"
)

// snapshotCmd captures a sandbox's writable state, or with a subcommand
// removes, exports or imports snapshots.
func snapshotCmd(args []string) int {
	switch sub, rest := subcommand(args, "host", "ttl"); sub {
	case "rm":
		return snapshotRm(rest)
	case "export":
		return snapshotExport(rest)
	case "import":
		return snapshotImport(rest)
	}
	fs := newFlagSet("snapshot", `usage: cordon snapshot [flags] ID
       cordon snapshot rm SNAPSHOT...
       cordon snapshot export SNAPSHOT > FILE
       cordon snapshot import [FILE]

Captures a sandbox's writable state (its workspace and its user's home)
as a snapshot on the daemon and prints the snapshot's id. Its processes
are stopped for the capture and go on after; they are not captured.
cordon create --from SNAPSHOT restores one; cordon snapshots lists them.`)
	ttl := duration(fs, "ttl", 0, "delete the snapshot after this long (0: keep it)")
	c, rest, code := daemonClient(fs, args)
	if c == nil {
		return code
	}
	if len(rest) != 1 {
		fs.Usage()
		return 2
	}
	sn, err := c.Snapshot(context.Background(), rest[0], *ttl)
	if err != nil {
		return apiFail(err)
	}
	fmt.Println(sn.ID)
	return 0
}

func snapshotRm(args []string) int {
	fs := newFlagSet("snapshot rm", "usage: cordon snapshot rm SNAPSHOT...\n\nDeletes snapshots.")
	c, rest, code := daemonClient(fs, args)
	if c == nil {
		return code
	}
	if len(rest) == 0 {
		fs.Usage()
		return 2
	}
	for _, id := range rest {
		if err := c.DeleteSnapshot(context.Background(), id); err != nil {
			return apiFail(err)
		}
	}
	return 0
}

func snapshotExport(args []string) int {
	fs := newFlagSet("snapshot export", "usage: cordon snapshot export SNAPSHOT > FILE\n\nWrites a snapshot as a tar (snapshot.json, data.tar.gz) to stdout, for cordon snapshot import on another daemon.")
	c, rest, code := daemonClient(fs, args)
	if c == nil {
		return code
	}
	if len(rest) != 1 {
		fs.Usage()
		return 2
	}
	if isTerminal(os.Stdout) {
		// A tar of compressed data on a terminal is noise at best, and
		// its bytes are the sandbox's: escape sequences among them.
		fmt.Fprintln(os.Stderr, "cordon snapshot export: standard output is a terminal; send it to a file: cordon snapshot export SNAPSHOT > FILE")
		return 2
	}
	if err := c.ExportSnapshot(context.Background(), rest[0], os.Stdout); err != nil {
		return apiFail(err)
	}
	return 0
}

func snapshotImport(args []string) int {
	fs := newFlagSet("snapshot import", "usage: cordon snapshot import [FILE]\n\nImports an exported snapshot (from FILE, else stdin) as yours and prints its new id.")
	c, rest, code := daemonClient(fs, args)
	if c == nil {
		return code
	}
	var r io.Reader = os.Stdin
	if len(rest) == 1 {
		f, err := os.Open(rest[0])
		if err != nil {
			fmt.Fprintf(os.Stderr, "cordon: %v\n", err)
			return 2
		}
		defer f.Close()
		r = f
	} else if len(rest) > 1 {
		fs.Usage()
		return 2
	}
	sn, err := c.ImportSnapshot(context.Background(), r)
	if err != nil {
		return apiFail(err)
	}
	fmt.Println(sn.ID)
	return 0
}

func snapshotsCmd(args []string) int {
	fs := newFlagSet("snapshots", "usage: cordon snapshots [flags]\n\nLists your snapshots on the daemon.")
	output := outputFormat(fs, "output format: json")
	c, _, code := daemonClient(fs, args)
	if c == nil {
		return code
	}
	list, err := c.Snapshots(context.Background())
	if err != nil {
		return apiFail(err)
	}
	if *output == "json" {
		return printJSON(list)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSOURCE\tSIZE\tFILES\tAGE\tEXPIRES")
	for _, sn := range list {
		exp := "-"
		if sn.ExpiresAt != nil {
			exp = time.Until(*sn.ExpiresAt).Round(time.Second).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", sn.ID, sn.Source, sn.Size, sn.Files, time.Since(sn.CreatedAt).Round(time.Second), exp)
	}
	tw.Flush()
	return 0
}

func forkCmd(args []string) int {
	fs := newFlagSet("fork", "usage: cordon fork [flags] ID N\n\nMakes N new sandboxes (1 to 32) from a sandbox's current state, each with\nan identity of its own, and prints their ids, one a line.")
	ttl := duration(fs, "ttl", 0, "destroy each fork after this long (0: the daemon's default)")
	c, rest, code := daemonClient(fs, args)
	if c == nil {
		return code
	}
	if len(rest) != 2 {
		fs.Usage()
		return 2
	}
	n, err := strconv.Atoi(rest[1])
	if err != nil {
		fmt.Fprintf(os.Stderr, "cordon fork: N %q is not a number\n", rest[1])
		return 2
	}
	forks, err := c.Fork(context.Background(), rest[0], api.ForkRequest{Count: n, TTLSeconds: wholeSeconds(*ttl)})
	if err != nil {
		return apiFail(err)
	}
	for _, f := range forks {
		fmt.Println(f.ID)
	}
	return 0
}

// subcommand finds a verb's subcommand: the first word that is not a flag
// or the value of one of the flags named (given as -flag VALUE), wherever
// the flags stand; it returns the word and the other arguments.
func subcommand(args []string, valued ...string) (string, []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if strings.HasPrefix(a, "-") {
			if n := strings.TrimLeft(a, "-"); !strings.Contains(n, "=") && slices.Contains(valued, n) {
				i++
			}
			continue
		}
		return a, append(append([]string{}, args[:i]...), args[i+1:]...)
	}
	return "", args
}
