package main

import (
	"context"
	"fmt"

	"github.com/cordon-sandbox/cordon/server/api"
	sclient "github.com/cordon-sandbox/cordon/server/client"
)

// pauseCmd and resumeCmd freeze and thaw sandboxes on the daemon;
// suspendCmd gives a sandbox's compute back, keeping its persistent
// workspace, until resumeCmd starts it again.
func pauseCmd(args []string) int   { return eachSandbox("pause", args, (*sclient.Client).Pause) }
func resumeCmd(args []string) int  { return eachSandbox("resume", args, (*sclient.Client).Resume) }
func suspendCmd(args []string) int { return eachSandbox("suspend", args, (*sclient.Client).Suspend) }
func stopCmd(args []string) int    { return eachSandbox("stop", args, (*sclient.Client).Suspend) }
func startCmd(args []string) int   { return eachSandbox("start", args, (*sclient.Client).Resume) }

// verbHelp says what each of eachSandbox's verbs does.
var verbHelp = map[string]string{
	"pause":   "Pauses sandboxes on the daemon: a paused sandbox's processes, its agent's\nincluded, stand still until it is resumed.",
	"resume":  "Resumes sandboxes on the daemon: a paused one's processes go on; a\nsuspended one starts again on its workspace (a new agent, nothing of\nbefore running).",
	"suspend": "Suspends sandboxes on the daemon that were created with a persistent\nworkspace (--persistent-workspace): everything they run is stopped and\ntheir compute given back, the workspace kept, until they are resumed.",
	"stop":    "Stops sandboxes on the daemon that were created with a persistent\nworkspace (--persistent-workspace): everything they run is stopped, their\nfiles kept on their disk, until cordon start (cordon suspend's other name).",
	"start":   "Starts stopped sandboxes on the daemon again on their persistent\nworkspace: a new agent and boot id, every file as it was, nothing of\nbefore running (cordon resume's other name).",
}

func eachSandbox(verb string, args []string, do func(*sclient.Client, context.Context, string) (*api.Sandbox, error)) int {
	fs := newFlagSet(verb, fmt.Sprintf("usage: cordon %s [flags] ID...\n\n%s", verb, verbHelp[verb]))
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
			code = apiFailOn(id, err)
		}
	}
	return code
}
