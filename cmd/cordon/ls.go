package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cordon-sandbox/cordon/internal/printable"
	"github.com/cordon-sandbox/cordon/server/api"
	sclient "github.com/cordon-sandbox/cordon/server/client"
)

func lsCmd(args []string) int {
	fs := newFlagSet("ls", "usage: cordon ls [flags] [ID...]\n\nLists the caller's sandboxes on the daemon (those named, if any are).")
	state := fs.String("state", "", "only sandboxes in this state (running, paused, destroying)")
	labels := labelFlag{}
	fs.Var(labels, "label", "only sandboxes with label `KEY=VALUE`; repeatable")
	quiet := fs.Bool("q", false, "print ids only")
	output := outputFormat(fs, "output format: json")
	c, ids, code := daemonClient(fs, args)
	if c == nil {
		return code
	}
	list, err := c.List(context.Background(), sclient.ListOptions{State: *state, Labels: labels})
	if err != nil {
		return apiFail(err)
	}
	if len(ids) > 0 {
		list = slices.DeleteFunc(list, func(sb api.Sandbox) bool { return !slices.Contains(ids, sb.ID) })
	}
	if *output == "json" {
		return printJSON(list)
	}
	if *quiet {
		for _, sb := range list {
			fmt.Println(sb.ID)
		}
		return 0
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTIER\tSTATE\tAGE\tEXPIRES\tLABELS")
	for _, sb := range list {
		exp := "-"
		if sb.ExpiresAt != nil {
			exp = "in " + time.Until(*sb.ExpiresAt).Round(time.Second).String()
		}
		var ls []string
		for k, v := range sb.Labels {
			ls = append(ls, printable.String(k+"="+v))
		}
		sort.Strings(ls)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", sb.ID, sb.Spec.Tier, sb.State, time.Since(sb.CreatedAt).Round(time.Second), exp, strings.Join(ls, ","))
	}
	tw.Flush()
	return 0
}
