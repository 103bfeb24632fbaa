package main

import (
	"context"
	"fmt"
	"os"
)

func rmCmd(args []string) int {
	fs := newFlagSet("rm", "usage: cordon rm [flags] ID...\n\nDestroys sandboxes on the daemon, each once its teardown is confirmed.")
	c, ids, code := daemonClient(fs, args)
	if c == nil {
		return code
	}
	if len(ids) == 0 {
		fmt.Fprintln(os.Stderr, "usage: cordon rm ID...")
		return 2
	}
	code = 0
	for _, id := range ids {
		if err := c.Delete(context.Background(), id); err != nil {
			code = apiFailOn(id, err)
		}
	}
	return code
}
