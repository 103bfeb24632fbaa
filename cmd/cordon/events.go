package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/cordon-sandbox/cordon/internal/printable"
	"github.com/cordon-sandbox/cordon/server/api"
)

func eventsCmd(args []string) int {
	fs := newFlagSet("events", "usage: cordon events [flags]\n\nFollows the daemon's events about the caller's sandboxes (created, ready,\nexec.started, exec.finished, oom, lost, destroyed, ...) until interrupted.")
	c, _, code := daemonClient(fs, args)
	if c == nil {
		return code
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := c.Events(ctx, func(ev api.Event) error {
		data := ""
		if len(ev.Data) > 0 {
			var kv []string
			for k, v := range ev.Data {
				kv = append(kv, printable.String(fmt.Sprintf("%s=%v", k, v)))
			}
			sort.Strings(kv)
			data = strings.Join(kv, " ")
		}
		_, err := fmt.Printf("%s %-14s %s %s\n", ev.Time.Local().Format(time.RFC3339Nano), ev.Type, ev.Sandbox, data)
		return err
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		return apiFail(err)
	}
	return 0
}
