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
	fs := newFlagSet("stats", "usage: cordon stats [flags] [ID...]\n       cordon stats --history [--since D] ID\n\nShows what the caller's running sandboxes on the daemon use (those named,\nif any are): CPU, memory, the writable space and tasks, against their\nlimits. The CPU's use is measured over --interval; a count the sandbox's\ntier does not keep shows as -. With --history, the daemon's readings of\none sandbox (every 5s unless cordon serve --metrics-interval says\notherwise), each CPU use since the reading before.")
	interval := duration(fs, "interval", time.Second, "measure the CPU's use over this long (100ms to 1m)")
	output := outputFormat(fs, "output format: json (each sandbox's metrics, its CPU use measured over --interval)")
	history := fs.Bool("history", false, "show the daemon's readings of the sandbox's metrics over time")
	since := duration(fs, "since", 0, "with --history, the readings of this long before now (0: all the daemon keeps)")
	c, ids, code := daemonClient(fs, args)
	if c == nil {
		return code
	}
	if *history {
		if len(ids) != 1 || *since < 0 {
			fmt.Fprintln(os.Stderr, "cordon: --history shows one sandbox, --since a duration of 0 or more")
			return 2
		}
		return statsHistory(c, ids[0], *since, *output)
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
	fmt.Fprintln(tw, "ID\t"+metricsColumns)
	for _, s := range out {
		fmt.Fprintln(tw, s.ID+"\t"+metricsRow(&s.Metrics))
	}
	tw.Flush()
	return code
}

// statsHistory is cordon stats --history: the daemon's readings of one
// sandbox, of the last since (0: all it keeps).
func statsHistory(c *sclient.Client, id string, since time.Duration, output string) int {
	var start time.Time
	if since > 0 {
		start = time.Now().Add(-since)
	}
	h, err := c.MetricsHistory(context.Background(), id, start, time.Time{})
	if err != nil {
		return apiFail(err)
	}
	if output == "json" {
		return printJSON(h)
	}
	if h.IntervalMs == 0 {
		fmt.Fprintln(os.Stderr, "cordon: the daemon keeps no history of metrics (cordon serve --metrics-interval 0)")
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\t"+metricsColumns)
	for i := range h.Metrics {
		m := &h.Metrics[i]
		fmt.Fprintln(tw, m.Timestamp.Local().Format(time.TimeOnly)+"\t"+metricsRow(m))
	}
	tw.Flush()
	return 0
}

// metricsColumns heads the columns metricsRow fills.
const metricsColumns = "CPU %\tCPU TIME\tMEMORY / LIMIT\tDISK / SIZE\tTASKS / LIMIT\tOOM KILLS"

// metricsRow is m as a table's columns.
func metricsRow(m *api.Metrics) string {
	mem, oom := "-", "-"
	if m.MemoryBytes != nil {
		mem = humanBytes(*m.MemoryBytes) + " / " + orNone(m.MemoryLimitBytes, humanBytes)
	}
	if m.OOMKills != nil {
		oom = fmt.Sprint(*m.OOMKills)
	}
	return fmt.Sprintf("%.1f%% of %g\t%s\t%s\t%s / %s\t%d / %s\t%s", m.CPUUsedPct, m.CPUCount,
		time.Duration(m.CPUSeconds*float64(time.Second)).Round(time.Millisecond), mem,
		humanBytes(m.DiskUsedBytes), humanBytes(m.DiskTotalBytes), m.Tasks, orNone(m.TasksLimit, func(n int64) string { return fmt.Sprint(n) }), oom)
}

// orNone is f(n), or "none" for a limit of 0.
func orNone(n int64, f func(int64) string) string {
	if n == 0 {
		return "none"
	}
	return f(n)
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
