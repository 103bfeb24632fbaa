package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/cordon-sandbox/cordon/server/api"
)

// keyCmd makes, lists and revokes the daemon's API keys (admin).
func keyCmd(args []string) int {
	const usage = "usage: cordon key create --tenant T [--name N] [--admin] | ls [-o json] | rm ID\n\nManages the daemon's API keys (as its administrator). A key's secret is\nshown once, at create."
	fs, code := subcommandFlags("key", args, usage, "create", "ls", "rm")
	if fs == nil {
		return code
	}
	tenant := fs.String("tenant", "", "the tenant the key acts for")
	name := fs.String("name", "", "a name to know the key by")
	admin := fs.Bool("admin", false, "the key administers the daemon (keys, pools)")
	output := outputFormat(fs, "output format: json")
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
