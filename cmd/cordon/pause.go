package main

import (
	"context"
	"fmt"
	"os"

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
