package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/cordon-sandbox/cordon/internal/printable"
	"github.com/cordon-sandbox/cordon/seeds"
	"github.com/cordon-sandbox/cordon/server/api"
)

// templateCmd saves or removes templates; templatesCmd lists them.
func templateCmd(all []string) int {
	const usage = "usage: cordon template save [flags] NAME [DIR=URL[#REF]...]\n       cordon template rm NAME..."
	sub, args := subcommand(all, "host", "from", "start", "seed-root", "tier", "image", "rootfs", "memory", "cpus", "pids", "disk", "user", "env", "allow", "egress-profile", "mount", "mount-owner", "runtime-class")
	// Flags may come before the subcommand; a request of help is one.
	said := []string{sub}
	if sub == "" {
		said = slices.DeleteFunc(slices.Clone(args), func(a string) bool { return !isHelp(a) })
	}
	if code, ok := subcommandOf("template", said, usage, "save", "rm"); !ok {
		return code
	}
	args = append([]string{sub}, args...)
	if sub == "rm" {
		fs := newFlagSet("template rm", "usage: cordon template rm NAME...\n\nDeletes templates (and the snapshots they kept).")
		c, rest, code := daemonClient(fs, args[1:])
		if c == nil {
			return code
		}
		if len(rest) == 0 {
			fs.Usage()
			return 2
		}
		for _, n := range rest {
			if err := c.DeleteTemplate(context.Background(), n); err != nil {
				return apiFail(err)
			}
		}
		return 0
	}
	fs := newFlagSet("template save", `usage: cordon template save [flags] NAME [DIR=URL[#REF]...]

Saves a template: a spec (the flags), and optionally a snapshot's state
(--from), git repositories (DIR=URL[#REF], under --seed-root) and a
program to start (--start). cordon create --template NAME makes a sandbox
from it: the snapshot restored, the repositories made present, the
program started as a session ("start").`)
	sf := addSpecFlags(fs, false)
	from := fs.String("from", "", "keep the state of snapshot `ID`")
	start := fs.String("start", "", "start `COMMAND` (sh -c) in each new sandbox, as a session")
	seedRoot := fs.String("seed-root", "repos", "the `DIR` the repositories go under")
	c, rest, code := daemonClient(fs, args[1:])
	if c == nil {
		return code
	}
	if len(rest) < 1 {
		fs.Usage()
		return 2
	}
	spec, err := sf.spec()
	if err != nil {
		fmt.Fprintf(os.Stderr, "cordon: %v\n", err)
		return 2
	}
	t := api.Template{Spec: toAPISpec(spec), FromSnapshot: *from, Start: *start}
	if len(rest) > 1 {
		repos, ok := repoArgs("template", rest[1:])
		if !ok {
			return 2
		}
		t.Seed = &api.SeedRequest{Seed: seeds.Seed{Name: rest[0], Repositories: repos}, Root: *seedRoot}
	}
	if _, err := c.PutTemplate(context.Background(), rest[0], t); err != nil {
		return apiFail(err)
	}
	return 0
}

func templatesCmd(args []string) int {
	fs := newFlagSet("templates", "usage: cordon templates [flags]\n\nLists your templates on the daemon.")
	output := outputFormat(fs, "output format: json")
	c, _, code := daemonClient(fs, args)
	if c == nil {
		return code
	}
	list, err := c.Templates(context.Background())
	if err != nil {
		return apiFail(err)
	}
	if *output == "json" {
		return printJSON(list)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tTIER\tSNAPSHOT\tREPOSITORIES\tSTART")
	for _, t := range list {
		n := 0
		if t.Seed != nil {
			n = len(t.Seed.Repositories)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", t.Name, or(t.Spec.Tier, "-"), or(t.Snapshot, "-"), n, or(printable.String(t.Start), "-"))
	}
	tw.Flush()
	return 0
}

func or(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// repoArgs reads DIR=URL[#REF] arguments, saying which one is wrong.
func repoArgs(verb string, args []string) ([]seeds.Repository, bool) {
	var out []seeds.Repository
	for _, a := range args {
		r, ok := repoArg(a)
		if !ok {
			fmt.Fprintf(os.Stderr, "cordon %s: %q: want DIR=URL[#REF]\n", verb, a)
			return nil, false
		}
		out = append(out, r)
	}
	return out, true
}

// repoArg reads DIR=URL[#REF]: REF a commit (hex) or a branch.
func repoArg(a string) (seeds.Repository, bool) {
	dir, u, ok := strings.Cut(a, "=")
	if !ok || dir == "" || u == "" {
		return seeds.Repository{}, false
	}
	r := seeds.Repository{Dir: dir, URL: u}
	if i := strings.LastIndexByte(u, '#'); i >= 0 {
		r.URL = u[:i]
		if ref := u[i+1:]; isHexCommit(ref) {
			r.Commit = ref
		} else {
			r.Branch = ref
		}
	}
	return r, true
}
