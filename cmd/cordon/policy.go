package main

import (
	"context"
	"fmt"
	"os"

	"github.com/cordon-sandbox/cordon/egress"
	"github.com/cordon-sandbox/cordon/server/api"
)

// policyCmd replaces a sandbox's egress policy: new connections follow it
// at once, and open ones it no longer allows are closed.
func policyCmd(args []string) int {
	fs := newFlagSet("policy", "usage: cordon policy [flags] ID\n\nReplaces a sandbox's network policy on the daemon: with no flag, deny-all.\nNew connections follow it at once; open ones it no longer allows close.")
	var allow egress.Rules
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
