package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/cordon-sandbox/cordon/server/api"
)

func createCmd(args []string) int {
	fs := newFlagSet("create", "usage: cordon create [flags]\n\nCreates a sandbox on the daemon and prints its id.")
	sf := addSpecFlags(fs, false)
	ttl := duration(fs, "ttl", 0, "destroy the sandbox after this long, whatever it is doing (0: the daemon's default)")
	idle := duration(fs, "idle", 0, "destroy it after this long without activity inside (0: the daemon's default; -1s: never)")
	pool := fs.String("pool", "", "claim from the warm pool `NAME`")
	from := fs.String("from", "", "restore the snapshot `ID` into it (and take the snapshot's spec unless flags give one)")
	tmpl := fs.String("template", "", "make it from the template `NAME` (cordon template save)")
	output := outputFormat(fs, "output format: json (the sandbox, rather than its id)")
	maxTimeout := duration(fs, "max-timeout", 0, "the longest timeout its commands may be given (0: 30m; at most the daemon's --max-exec-timeout)")
	persistent := fs.Bool("persistent-workspace", false, "keep its writable space (workspace, home, /tmp) on storage of its own, of --disk bytes (the daemon's --disk-size without), so that it can be stopped (cordon stop) and started (cordon start) on it, across daemon restarts and host reboots")
	autostart := fs.Bool("autostart", false, "with --persistent-workspace: start it again when the daemon starts and finds it stopped though it was running (a reboot); without, it is left stopped")
	labels := labelFlag{}
	fs.Var(labels, "label", "attach a label `KEY=VALUE`; repeatable")
	c, rest, code := daemonClient(fs, args)
	if c == nil {
		return code
	}
	if len(rest) > 0 {
		fs.Usage()
		return 2
	}
	spec, err := sf.spec()
	if err != nil {
		fmt.Fprintf(os.Stderr, "cordon: %v\n", err)
		return 2
	}
	spec.MaxTimeout, spec.PersistentWorkspace = *maxTimeout, *persistent
	aspec := toAPISpec(spec)
	aspec.Autostart = *autostart
	req := api.CreateRequest{Spec: aspec, TTLSeconds: wholeSeconds(*ttl), IdleTimeoutSeconds: idleSeconds(*idle), Labels: labels, Pool: *pool, FromSnapshot: *from, Template: *tmpl}
	sb, err := c.Create(context.Background(), req)
	if err != nil {
		return apiFail(err)
	}
	if *output == "json" {
		return printJSON(sb)
	}
	fmt.Println(sb.ID)
	return 0
}

// wholeSeconds is a duration as the API takes it, in seconds, a part of
// one counted whole, away from zero (500ms is not 0, which would ask for
// the default, nor -500ms, which the daemon refuses).
func wholeSeconds(d time.Duration) int64 {
	n := int64(d / time.Second)
	switch {
	case d%time.Second > 0:
		n++
	case d%time.Second < 0:
		n--
	}
	return n
}

// idleSeconds is an idle timeout as the API takes it: -1 for never.
func idleSeconds(d time.Duration) int64 {
	if d < 0 {
		return -1
	}
	return wholeSeconds(d)
}

// updateCmd moves sandboxes' TTL, idle timeout or both.
func updateCmd(args []string) int {
	fs := newFlagSet("update", "usage: cordon update [flags] ID...\n\nGives sandboxes on the daemon a new TTL, counted from now (to keep one\nalive longer, or to end it sooner), a new idle timeout, or both.")
	ttl := duration(fs, "ttl", 0, "destroy the sandbox this long from now, whatever it is doing (0: the daemon's default, which may be none)")
	idle := duration(fs, "idle", 0, "destroy it after this long without activity inside (0: the daemon's default; -1s: never)")
	output := outputFormat(fs, "output format: json (each sandbox as it now is)")
	c, ids, code := daemonClient(fs, args)
	if c == nil {
		return code
	}
	var req api.UpdateRequest
	if isSet(fs, "ttl") {
		req.TTLSeconds = new(wholeSeconds(*ttl))
	}
	if isSet(fs, "idle") {
		req.IdleTimeoutSeconds = new(idleSeconds(*idle))
	}
	if len(ids) == 0 || (req.TTLSeconds == nil && req.IdleTimeoutSeconds == nil) {
		fs.Usage()
		return 2
	}
	code = 0
	for _, id := range ids {
		sb, err := c.Update(context.Background(), id, req)
		if err != nil {
			code = apiFailOn(id, err)
			continue
		}
		if *output == "json" {
			printJSON(sb)
		}
	}
	return code
}
