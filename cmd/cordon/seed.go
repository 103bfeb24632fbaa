package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/cordon-sandbox/cordon/seeds"
	"github.com/cordon-sandbox/cordon/server/api"
)

// seedCmd makes git repositories present in a sandbox, cloning only what
// is missing and refusing drift.
func seedCmd(args []string) int {
	fs := newFlagSet("seed", `usage: cordon seed [flags] ID DIR=URL[#REF]...

Makes git repositories present in a sandbox on the daemon, under --root:
each DIR=URL clones URL (http or https; no credentials, no ssh) into
ROOT/DIR, at REF: a commit (7 to 40 hex digits) or a branch (default: the
remote's default branch). A repository already there is checked (its
origin, and that its pinned or recorded commit is an ancestor of HEAD);
drift refuses the whole seed, changing nothing. Clones run inside the
sandbox, through its egress policy: the repository host must be allowed.
Prints each repository's dir, state (cloned or present) and commit.`)
	root := fs.String("root", "repos", "the `DIR` the repositories go under (relative: the workspace's)")
	name := fs.String("name", "seed", "the seed's `NAME`")
	file := fs.String("file", "", "read the seed from `FILE` (JSON: name, repositories) instead of arguments")
	c, rest, code := daemonClient(fs, args)
	if c == nil {
		return code
	}
	if len(rest) < 1 || (len(rest) < 2 && *file == "") {
		fs.Usage()
		return 2
	}
	seed := seeds.Seed{Name: *name}
	if *file != "" {
		b, err := os.ReadFile(*file)
		if err == nil {
			err = json.Unmarshal(b, &seed)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "cordon seed: %s: %v\n", *file, err)
			return 2
		}
	}
	repos, ok := repoArgs("seed", rest[1:])
	if !ok {
		return 2
	}
	seed.Repositories = append(seed.Repositories, repos...)
	res, err := c.Seed(context.Background(), rest[0], api.SeedRequest{Seed: seed, Root: *root})
	if err != nil {
		return apiFail(err)
	}
	for _, r := range res.Repositories {
		fmt.Printf("%s\t%s\t%s\n", r.Dir, r.State, r.Commit)
	}
	return 0
}

func isHexCommit(s string) bool {
	if len(s) < 7 || len(s) > 40 {
		return false
	}
	return strings.Trim(s, "0123456789abcdef") == ""
}
