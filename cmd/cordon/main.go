// Command cordon is the host side of cordon: it creates sandboxes and runs
// commands in them. Each verb lives in its own file.
package main

import (
	"fmt"
	"os"
)

type verb struct {
	summary string
	run     func(args []string) int
}

var verbs = map[string]verb{
	"run":     {"run one command in a fresh sandbox", runCmd},
	"serve":   {"run the daemon (REST API, registry, reaping, pools)", serveCmd},
	"create":  {"create a sandbox on the daemon", createCmd},
	"ls":      {"list the daemon's sandboxes", lsCmd},
	"exec":    {"run a command in a sandbox on the daemon", execCmd},
	"cp":      {"copy a file into or out of a sandbox on the daemon", cpCmd},
	"rm":      {"destroy sandboxes on the daemon", rmCmd},
	"events":  {"follow the daemon's lifecycle events", eventsCmd},
	"image":   {"pull, import, list and remove images", imageCmd},
	"version": {"print version information", versionCmd},
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	v, ok := verbs[os.Args[1]]
	if !ok {
		if os.Args[1] != "help" && os.Args[1] != "-h" && os.Args[1] != "--help" {
			fmt.Fprintf(os.Stderr, "cordon: unknown command %q\n", os.Args[1])
		}
		usage()
		os.Exit(2)
	}
	os.Exit(v.run(os.Args[2:]))
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: cordon <command> [flags]\n\ncommands:")
	for _, name := range []string{"run", "serve", "create", "ls", "exec", "cp", "rm", "events", "image", "version"} {
		fmt.Fprintf(os.Stderr, "  %-8s %s\n", name, verbs[name].summary)
	}
}
