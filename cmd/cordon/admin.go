package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/cordon-sandbox/cordon/server/api"
	sclient "github.com/cordon-sandbox/cordon/server/client"
)

// pauseCmd and resumeCmd freeze and thaw sandboxes on the daemon.
func pauseCmd(args []string) int  { return eachSandbox("pause", args, (*sclient.Client).Pause) }
func resumeCmd(args []string) int { return eachSandbox("resume", args, (*sclient.Client).Resume) }

func eachSandbox(verb string, args []string, do func(*sclient.Client, context.Context, string) (*api.Sandbox, error)) int {
	fs := newFlagSet(verb, fmt.Sprintf("usage: cordon %s [flags] ID...\n\n%s sandboxes on the daemon: a paused sandbox's processes, its agent's\nincluded, stand still until it is resumed.", verb, map[string]string{"pause": "Pauses", "resume": "Resumes"}[verb]))
	c, ids, code := daemonClient(fs, args)
	if c == nil {
		return code
	}
	if len(ids) == 0 {
		fs.Usage()
		return 2
	}
	code = 0
	for _, id := range ids {
		if _, err := do(c, context.Background(), id); err != nil {
			fmt.Fprintf(os.Stderr, "cordon: %s: ", id)
			code = apiFail(err)
		}
	}
	return code
}

// policyCmd replaces a sandbox's egress policy: new connections follow it
// at once, and open ones it no longer allows are closed.
func policyCmd(args []string) int {
	fs := newFlagSet("policy", "usage: cordon policy [flags] ID\n\nReplaces a sandbox's network policy on the daemon: with no flag, deny-all.\nNew connections follow it at once; open ones it no longer allows close.")
	var allow allowFlag
	fs.Var(&allow, "allow", "let the sandbox reach `HOST[:PORT,...]`; repeatable")
	profile := fs.String("egress-profile", "", "the rules of the egress profile in `FILE` (JSON)")
	allowAll := fs.Bool("allow-all-egress", false, "let the sandbox reach any public address")
	c, rest, code := daemonClient(fs, args)
	if c == nil {
		return code
	}
	if len(rest) != 1 {
		fs.Usage()
		return 2
	}
	p, err := egressPolicy(allow, *profile, *allowAll)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cordon: %v\n", err)
		return 2
	}
	e := api.Egress{Mode: "deny-all"}
	if p != nil {
		e = api.Egress{Mode: string(p.Mode), Rules: p.Rules}
	}
	if _, err := c.SetNetworkPolicy(context.Background(), rest[0], e); err != nil {
		return apiFail(err)
	}
	return 0
}

// keyCmd makes, lists and revokes the daemon's API keys (admin).
func keyCmd(args []string) int {
	const usage = "usage: cordon key create --tenant T [--name N] [--admin] | ls [-o json] | rm ID\n\nManages the daemon's API keys (as its administrator). A key's secret is\nshown once, at create."
	fs := subcommandFlags("key", args, usage)
	if fs == nil {
		return 2
	}
	tenant := fs.String("tenant", "", "the tenant the key acts for")
	name := fs.String("name", "", "a name to know the key by")
	admin := fs.Bool("admin", false, "the key administers the daemon (keys, pools)")
	output := fs.String("o", "", "output format: json")
	c, rest, code := daemonClient(fs, args[1:])
	if c == nil {
		return code
	}
	ctx := context.Background()
	switch args[0] {
	case "create":
		if *tenant == "" || len(rest) != 0 {
			fmt.Fprintln(os.Stderr, "cordon key create: --tenant is required")
			return 2
		}
		k, err := c.CreateKey(ctx, api.KeyRequest{Tenant: *tenant, Name: *name, Admin: *admin})
		if err != nil {
			return apiFail(err)
		}
		if *output == "json" {
			return printJSON(k)
		}
		fmt.Printf("%s %s\n", k.ID, k.Secret)
	case "ls":
		keys, err := c.Keys(ctx)
		return listOut(keys, err, *output, "ID\tTENANT\tNAME\tADMIN\tCREATED", func(k api.Key) []any {
			return []any{k.ID, k.Tenant, k.Name, k.Admin, k.CreatedAt.Local().Format(time.DateTime)}
		})
	case "rm":
		return removeEach(usage, rest, func(id string) error { return c.DeleteKey(ctx, id) })
	default:
		fmt.Fprintln(os.Stderr, usage)
		return 2
	}
	return 0
}

// poolCmd keeps warm pools of ready sandboxes on the daemon (admin).
func poolCmd(args []string) int {
	const usage = "usage: cordon pool put NAME --size N [spec flags] | ls [-o json] | rm NAME\n\nManages the daemon's warm pools (as its administrator): a create whose\nspec equals a pool's, or that names it, claims a ready sandbox from it."
	fs := subcommandFlags("pool", args, usage)
	if fs == nil {
		return 2
	}
	sf := addSpecFlags(fs, false)
	size := fs.Int("size", 0, "how many ready sandboxes the pool keeps")
	output := fs.String("o", "", "output format: json")
	c, rest, code := daemonClient(fs, args[1:])
	if c == nil {
		return code
	}
	ctx := context.Background()
	switch args[0] {
	case "put":
		if len(rest) != 1 || *size < 1 {
			fmt.Fprintln(os.Stderr, "cordon pool put: want NAME and --size N (1 or more)")
			return 2
		}
		spec, err := sf.spec()
		if err != nil {
			fmt.Fprintf(os.Stderr, "cordon: %v\n", err)
			return 2
		}
		p, err := c.PutPool(ctx, rest[0], toAPISpec(spec), *size)
		if err != nil {
			return apiFail(err)
		}
		if *output == "json" {
			return printJSON(p)
		}
	case "ls":
		pools, err := c.Pools(ctx)
		return listOut(pools, err, *output, "NAME\tTIER\tSIZE\tREADY", func(p api.Pool) []any {
			return []any{p.Name, p.Spec.Tier, p.Size, p.Ready}
		})
	case "rm":
		return removeEach(usage, rest, func(name string) error { return c.DeletePool(ctx, name) })
	default:
		fmt.Fprintln(os.Stderr, usage)
		return 2
	}
	return 0
}

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
			fmt.Fprint(tw, c)
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
