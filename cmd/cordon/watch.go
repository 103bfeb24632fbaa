package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/cordon-sandbox/cordon/agent/wire"
	"github.com/cordon-sandbox/cordon/internal/printable"
)

func watchCmd(args []string) int {
	fs := newFlagSet("watch", "usage: cordon watch [flags] ID PATH\n\nPrints the changes under a directory inside a sandbox on the daemon as they\nhappen, a line each (create, write, remove, rename, overflow), until\ninterrupted or the directory is removed.")
	recursive := fs.Bool("r", false, "the directories below too")
	output := outputFormat(fs, "output format: json (an event a line)")
	c, rest, code := daemonClientArgs(fs, args, 2)
	if c == nil {
		return code
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := c.Agent(rest[0]).Watch(ctx, rest[1], *recursive, func(ev wire.WatchEvent) error {
		if ev.Type == wire.WatchReady {
			fmt.Fprintln(os.Stderr, "cordon: watching", rest[1])
			return nil
		}
		if *output == "json" {
			b, _ := json.Marshal(ev)
			fmt.Println(string(b))
			return nil
		}
		// The sandbox's words (the agent's event, the paths it names),
		// shown escaped where they hold what a terminal would act on (-o
		// json has them as they are).
		line := printable.String(ev.Type) + " " + printable.String(ev.Path)
		if ev.From != "" {
			line += " (from " + printable.String(ev.From) + ")"
		}
		fmt.Println(line)
		return nil
	})
	if err != nil && ctx.Err() == nil {
		return apiFail(err)
	}
	return 0
}
