//go:build !cordon_light

package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cordon-sandbox/cordon/backend/docker"
	"github.com/cordon-sandbox/cordon/image"
)

// imageDir is where `cordon image` and `cordon run --image` keep images
// (CORDON_IMAGE_DIR overrides the default).
func imageDir() string {
	if d := os.Getenv("CORDON_IMAGE_DIR"); d != "" {
		return d
	}
	return image.DefaultDir()
}

const imageUsage = "usage: cordon image pull REF | import PATH [--name NAME] | import --tier docker TARBALL | ls [-o json] | rm NAME|DIGEST | gc --max SIZE"

func imageCmd(args []string) int {
	if code, ok := subcommandOf("image", args, imageUsage, "pull", "import", "ls", "rm", "gc"); !ok {
		return code
	}
	usage := func() int {
		fmt.Fprintln(os.Stderr, imageUsage)
		return 2
	}
	st, err := image.Open(imageDir(), image.DefaultLimits)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cordon: %v\n", err)
		return exitCordon
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	st.Progress = unpackProgress()
	fs := newFlagSet("image "+args[0], imageUsage)
	asName := fs.String("name", "", "name the imported image")
	maxSize := size(fs, "max", 0, true, "collect least recently used images until the cache is under `SIZE`")
	output := outputFormat(fs, "output format: json (ls)")
	tier := fs.String("tier", "", "import into this tier's own store (docker: the engine's, as docker load)")
	rest, code, ok := parseInterspersed(fs, args[1:])
	if !ok {
		return code
	}
	report := func(verb string, recs ...*image.Record) {
		for _, r := range recs {
			fmt.Printf("%s %s %s (%s)\n", verb, strings.Join(r.Names, ","), short(r.Digest), humanBytes(r.Bytes))
		}
	}
	switch args[0] {
	case "pull":
		if len(rest) != 1 {
			return usage()
		}
		start := time.Now()
		fmt.Fprintf(os.Stderr, "pulling %s...\n", rest[0])
		r, err := st.Pull(ctx, rest[0])
		if err != nil {
			fmt.Fprintf(os.Stderr, "cordon: %v\n", err)
			return exitCordon
		}
		report(fmt.Sprintf("pulled in %s:", time.Since(start).Round(time.Millisecond)), r)
	case "import":
		if len(rest) != 1 {
			return usage()
		}
		if *tier != "" {
			return importInto(ctx, *tier, rest[0])
		}
		recs, err := st.Import(ctx, rest[0], *asName)
		if err != nil {
			fmt.Fprintf(os.Stderr, "cordon: %v\n", err)
			return exitCordon
		}
		report("imported", recs...)
	case "ls":
		recs, err := st.List()
		if err != nil {
			fmt.Fprintf(os.Stderr, "cordon: %v\n", err)
			return exitCordon
		}
		if *output == "json" {
			return printJSON(recs)
		}
		tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAMES\tDIGEST\tSIZE\tLAST USED")
		for _, r := range recs {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", strings.Join(r.Names, ","), short(r.Digest), humanBytes(r.Bytes), r.LastUsed.Local().Format(time.DateTime))
		}
		tw.Flush()
	case "rm":
		if len(rest) != 1 {
			return usage()
		}
		if err := st.Remove(rest[0]); err != nil {
			fmt.Fprintf(os.Stderr, "cordon: %v\n", err)
			return exitCordon
		}
		fmt.Printf("removed %s\n", rest[0])
	case "gc":
		if !isSet(fs, "max") {
			fmt.Fprintln(os.Stderr, "cordon image gc: --max SIZE is required: the cache is collected down to it (0 empties it of unused images)")
			return 2
		}
		removed, err := st.GC(*maxSize)
		if err != nil {
			fmt.Fprintf(os.Stderr, "cordon: %v\n", err)
			return exitCordon
		}
		report("removed", removed...)
	default:
		return usage()
	}
	return 0
}

func short(digest string) string {
	d := strings.TrimPrefix(digest, "sha256:")
	return d[:min(12, len(d))]
}

// unpackProgress shows an unpack as it goes: a progress bar per layer on a
// terminal, one plain line per layer otherwise.
func unpackProgress() func(image.Progress) {
	var bar *progress
	return func(p image.Progress) {
		name := fmt.Sprintf("layer %d/%d", p.Layer, p.Layers)
		if bar == nil || bar.name != name {
			bar = newProgress(name, -1)
		}
		if !p.Done {
			bar.add(int(p.Bytes - bar.n))
			return
		}
		if bar.shown {
			bar.done(nil)
		} else {
			fmt.Fprintf(os.Stderr, "%s %s: %s unpacked\n", short(p.Digest), name, humanBytes(p.Bytes))
		}
		bar = nil
	}
}

// importInto loads a `docker save` tarball into a tier's own image store:
// the docker tier's engine.
func importInto(ctx context.Context, tier, path string) int {
	if tier != docker.Name {
		fmt.Fprintf(os.Stderr, "cordon: --tier %s: only the docker tier keeps images of its own\n", tier)
		return 2
	}
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cordon: %v\n", err)
		return exitCordon
	}
	defer f.Close()
	b := docker.New(docker.Config{StateDir: dockerStateDir()})
	defer b.Close()
	loaded, err := b.Load(ctx, f)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cordon: %v\n", err)
		return exitCordon
	}
	for _, l := range loaded {
		fmt.Println(l)
	}
	return 0
}
