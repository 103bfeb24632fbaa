// Command cordon is the host side of cordon: it creates sandboxes and runs
// commands in them. Each verb lives in its own file.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
)

type verb struct {
	summary string
	run     func(args []string) int
}

var verbs = map[string]verb{
	"run":          {"run one command in a fresh sandbox", runCmd},
	"serve":        {"run the daemon (REST API, registry, reaping, pools)", serveCmd},
	"mcp":          {"serve sandboxes as MCP tools to a model (stdio or streamable HTTP)", mcpCmd},
	"run-server":   {"serve the one-shot run API (and the questpie /run) in front of a daemon", runServerCmd},
	"create":       {"create a sandbox on the daemon", createCmd},
	"ls":           {"list the daemon's sandboxes", lsCmd},
	"exec":         {"run a command in a sandbox on the daemon", execCmd},
	"cp":           {"copy a file into or out of a sandbox on the daemon", cpCmd},
	"rm":           {"destroy sandboxes on the daemon", rmCmd},
	"events":       {"follow the daemon's lifecycle events", eventsCmd},
	"shell":        {"open an interactive terminal in a sandbox on the daemon", shellCmd},
	"sessions":     {"list a sandbox's sessions (programs started with exec -d)", sessionsCmd},
	"attach":       {"follow a session's output from any offset", attachCmd},
	"kill":         {"signal a session and confirm it gone", killCmd},
	"watch":        {"print the changes under a directory in a sandbox", watchCmd},
	"expose":       {"give a sandbox port a URL of the daemon, with its own token", exposeCmd},
	"url":          {"print a URL of the daemon that reads or writes one file of a sandbox, no key needed", urlCmd},
	"port-forward": {"forward local ports to ports inside a sandbox on the daemon", portForwardCmd},
	"image":        {"pull, import, list and remove images", imageCmd},
	"update":       {"give sandboxes on the daemon a new TTL or idle timeout", updateCmd},
	"stats":        {"show what sandboxes on the daemon use: CPU, memory, disk, tasks", statsCmd},
	"pause":        {"pause sandboxes on the daemon", pauseCmd},
	"resume":       {"resume paused or suspended sandboxes on the daemon", resumeCmd},
	"suspend":      {"suspend sandboxes with a persistent workspace on the daemon", suspendCmd},
	"stop":         {"stop sandboxes with a persistent workspace on the daemon, keeping their files", stopCmd},
	"start":        {"start stopped sandboxes again on their persistent workspace", startCmd},
	"snapshot":     {"capture a sandbox's writable state; rm, export, import snapshots", snapshotCmd},
	"snapshots":    {"list your snapshots on the daemon", snapshotsCmd},
	"fork":         {"make N sandboxes from a sandbox's current state", forkCmd},
	"template":     {"save or remove a template (a spec with a snapshot, repositories, a start program)", templateCmd},
	"templates":    {"list your templates on the daemon", templatesCmd},
	"seed":         {"make git repositories present in a sandbox on the daemon", seedCmd},
	"policy":       {"replace a sandbox's network policy on the daemon", policyCmd},
	"key":          {"manage the daemon's API keys (admin)", keyCmd},
	"pool":         {"manage the daemon's warm pools (admin)", poolCmd},
	"tiers":        {"list the isolation tiers this host offers", tiersCmd},
	"version":      {"print version information", versionCmd},
}

var verbOrder = []string{"run", "serve", "run-server", "mcp", "create", "ls", "exec", "shell", "sessions", "attach", "kill", "port-forward", "expose", "url", "watch", "cp", "rm", "update", "stats", "pause", "resume", "suspend", "stop", "start", "snapshot", "snapshots", "fork", "template", "templates", "seed", "policy", "events", "image", "key", "pool", "tiers", "version"}

func main() {
	if len(os.Args) < 2 {
		usage(os.Stderr)
		os.Exit(2)
	}
	v, ok := verbs[os.Args[1]]
	if !ok {
		if os.Args[1] == "help" || os.Args[1] == "-h" || os.Args[1] == "--help" {
			usage(os.Stdout)
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "cordon: unknown command %q (cordon --help lists them)\n", os.Args[1])
		os.Exit(2)
	}
	os.Exit(v.run(os.Args[2:]))
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: cordon <command> [flags]   (cordon <command> --help for its own)\n\ncommands:")
	for _, name := range verbOrder {
		fmt.Fprintf(w, "  %-12s %s\n", name, verbs[name].summary)
	}
}

// printJSON writes v to standard output as indented JSON (-o json).
func printJSON(v any) int {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		fmt.Fprintf(os.Stderr, "cordon: %v\n", err)
		return exitCordon
	}
	return 0
}
