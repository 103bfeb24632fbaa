package main

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/cordon-sandbox/cordon/server/api"
	sclient "github.com/cordon-sandbox/cordon/server/client"
)

// sandboxStats is one sandbox's line of cordon stats -o json.
type sandboxStats struct {
	ID string `json:"id"`
	api.Metrics
}

func statsCmd(args []string) int {
	fs := newFlagSet("stats", "usage: cordon stats [flags] [ID...]\n\nShows what the caller's running sandboxes on the daemon use (those named,\nif any are): CPU, memory, the writable space and tasks, against their\nlimits. The CPU's use is measured over --interval; a count the sandbox's\ntier does not keep shows as -.")
	interval := duration(fs, "interval", time.Second, "measure the CPU's use over this long (100ms to 1m)")
	output := outputFormat(fs, "output format: json (each sandbox's metrics, its CPU use measured over --interval)")
	c, ids, code := daemonClient(fs, args)
	if c == nil {
		return code
	}
	if *interval < 100*time.Millisecond || *interval > time.Minute {
		fmt.Fprintln(os.Stderr, "cordon: --interval must be between 100ms and 1m")
		return 2
	}
	ctx := context.Background()
	if len(ids) == 0 {
		list, err := c.List(ctx, sclient.ListOptions{State: api.StateRunning})
		if err != nil {
			return apiFail(err)
		}
		for _, sb := range list {
			ids = append(ids, sb.ID)
		}
	}
	code = 0
	first := make([]*api.Metrics, len(ids))
	for i, id := range ids {
		m, err := c.Metrics(ctx, id)
		if err != nil {
			code = apiFailOn(id, err)
			continue
		}
		first[i] = m
	}
	time.Sleep(*interval)
	var out []sandboxStats
	for i, id := range ids {
		if first[i] == nil {
			continue
		}
		m, err := c.Metrics(ctx, id)
		if err != nil {
			code = apiFailOn(id, err)
			continue
		}
		used := time.Duration((m.CPUSeconds - first[i].CPUSeconds) * float64(time.Second))
		m.CPUUsedPct = api.CPUUsedPct(used, m.Timestamp.Sub(first[i].Timestamp), m.CPUCount)
		out = append(out, sandboxStats{ID: id, Metrics: *m})
	}
	if *output == "json" {
		if out == nil {
			out = []sandboxStats{}
		}
		printJSON(out)
		return code
	}
	if len(out) == 0 && len(ids) > 0 {
		return code // each said why
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tCPU %\tCPU TIME\tMEMORY / LIMIT\tDISK / SIZE\tTASKS / LIMIT\tOOM KILLS")
	for _, s := range out {
		mem, oom := "-", "-"
		if s.MemoryBytes != nil {
			mem = humanBytes(*s.MemoryBytes) + " / " + orNone(s.MemoryLimitBytes, humanBytes)
		}
		if s.OOMKills != nil {
			oom = fmt.Sprint(*s.OOMKills)
		}
		fmt.Fprintf(tw, "%s\t%.1f%% of %g\t%s\t%s\t%s / %s\t%d / %s\t%s\n", s.ID, s.CPUUsedPct, s.CPUCount,
			time.Duration(s.CPUSeconds*float64(time.Second)).Round(time.Millisecond), mem,
			humanBytes(s.DiskUsedBytes), humanBytes(s.DiskTotalBytes), s.Tasks, orNone(s.TasksLimit, func(n int64) string { return fmt.Sprint(n) }), oom)
	}
	tw.Flush()
	return code
}

// orNone is f(n), or "none" for a limit of 0.
func orNone(n int64, f func(int64) string) string {
	if n == 0 {
		return "none"
	}
	return f(n)
}
