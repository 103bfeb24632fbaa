package main

import (
	"context"
	"fmt"
	"os"

	"github.com/cordon-sandbox/cordon/server/api"
)

// poolCmd keeps warm pools of ready sandboxes on the daemon (admin).
func poolCmd(args []string) int {
	const usage = "usage: cordon pool put NAME --size N [spec flags] | ls [-o json] | rm NAME\n\nManages the daemon's warm pools (as its administrator): a create whose\nspec equals a pool's, or that names it, claims a ready sandbox from it."
	fs, code := subcommandFlags("pool", args, usage, "put", "ls", "rm")
	if fs == nil {
		return code
	}
	sf := addSpecFlags(fs, false)
	size := fs.Int("size", 0, "how many ready sandboxes the pool keeps")
	output := outputFormat(fs, "output format: json")
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
