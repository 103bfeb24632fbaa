// Package seeds makes git repositories present in a sandbox, doing only
// what is missing: a seed names repositories (a URL, a pinned commit or a
// branch, a directory under a root), and Ensure checks each one already
// there (its origin, and that its pinned or recorded commit is an
// ancestor of its HEAD), refuses drift without touching anything, and
// clones what is missing into a partial directory that it then moves into
// place. Cloning runs inside the sandbox, through its egress boundary.
package seeds

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"
)

// Repository is one repository of a seed.
type Repository struct {
	URL string `json:"url"`
	// Commit pins the checkout; else Branch (else the remote's default
	// branch) is cloned and the commit it was at is recorded.
	Commit string `json:"commit,omitempty"`
	Branch string `json:"branch,omitempty"`
	// Dir is where it goes, relative to the root.
	Dir string `json:"dir"`
}

// Seed is a named set of repositories.
type Seed struct {
	Name         string       `json:"name"`
	Repositories []Repository `json:"repositories"`
}

// Bounds of a seed.
const (
	MaxRepositories = 64
	maxURL          = 2048
)

// Outcome is what Ensure found or did for one repository.
type Outcome struct {
	Dir    string `json:"dir"`
	State  string `json:"state"` // cloned, or present (nothing done)
	Commit string `json:"commit"`
}

// Drift is a repository present but not as the seed says.
type Drift struct {
	Dir    string `json:"dir"`
	Reason string `json:"reason"`
}

// DriftError refuses a seed whose repositories drifted; nothing was
// touched.
type DriftError struct{ Drift []Drift }

func (e *DriftError) Error() string {
	parts := make([]string, len(e.Drift))
	for i, d := range e.Drift {
		parts[i] = d.Dir + ": " + d.Reason
	}
	return "the seed's repositories drifted (nothing was changed): " + strings.Join(parts, "; ")
}

// ErrInvalid marks a seed refused before anything ran.
var ErrInvalid = errors.New("invalid seed")

func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, a...)...)
}

// Validate refuses what must not reach the sandbox: URLs with credentials,
// ssh:// and git@ URLs (nothing secret enters the guest), paths that leave
// the root, malformed commits and branches.
func (s Seed) Validate(root string) error {
	if root == "" || strings.ContainsRune(root, 0) {
		return invalid("a root is needed")
	}
	if s.Name == "" || len(s.Name) > 128 || strings.ContainsAny(s.Name, "/\x00") {
		return invalid("name: 1 to 128 characters, no '/'")
	}
	if len(s.Repositories) == 0 || len(s.Repositories) > MaxRepositories {
		return invalid("repositories: 1 to %d", MaxRepositories)
	}
	seen := map[string]bool{}
	for i, r := range s.Repositories {
		field := fmt.Sprintf("repositories[%d]", i)
		if strings.HasPrefix(r.URL, "git@") || strings.HasPrefix(strings.ToLower(r.URL), "ssh://") {
			return invalid("%s.url: ssh and git@ URLs are refused (no key enters the sandbox); use https", field)
		}
		u, err := url.Parse(r.URL)
		if err != nil || len(r.URL) > maxURL || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return invalid("%s.url %q: want an http(s) URL", field, r.URL)
		}
		if u.User != nil {
			return invalid("%s.url: URLs with credentials are refused (nothing secret enters the sandbox)", field)
		}
		if r.Commit != "" && r.Branch != "" {
			return invalid("%s: a commit or a branch, not both", field)
		}
		if r.Commit != "" && !hexCommit(r.Commit) {
			return invalid("%s.commit %q: want 7 to 40 hexadecimal digits", field, r.Commit)
		}
		if r.Branch != "" && !branchName(r.Branch) {
			return invalid("%s.branch %q: not a branch name", field, r.Branch)
		}
		d := path.Clean(r.Dir)
		if r.Dir == "" || path.IsAbs(r.Dir) || d == "." || d == ".." || strings.HasPrefix(d, "../") || strings.ContainsRune(r.Dir, 0) {
			return invalid("%s.dir %q: want a relative path inside the root", field, r.Dir)
		}
		if seen[d] {
			return invalid("%s.dir %q: named twice", field, r.Dir)
		}
		seen[d] = true
	}
	return nil
}

func hexCommit(s string) bool {
	if len(s) < 7 || len(s) > 40 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// branchName admits what git check-ref-format would, less its rarer
// corners: no leading '-', no "..", no control characters or ~^:?*[\ or
// spaces.
func branchName(s string) bool {
	if s == "" || len(s) > 255 || strings.HasPrefix(s, "-") || strings.Contains(s, "..") || strings.HasSuffix(s, ".lock") || strings.HasSuffix(s, "/") {
		return false
	}
	for _, c := range s {
		if c < 0x20 || c == 0x7f || strings.ContainsRune(" ~^:?*[\\", c) {
			return false
		}
	}
	return true
}

// Shell runs a script (sh -c SCRIPT sh ARGS...) in the sandbox.
type Shell func(ctx context.Context, script string, args ...string) (stdout, stderr string, code int, err error)

// inspect prints, for the repository at $1: "missing", or "present" and
// then its origin, HEAD, recorded commit and recorded ref, a line each.
const inspect = `d=$1
[ -e "$d" ] || { echo missing; exit 0; }
[ -d "$d/.git" ] || { echo notgit; exit 0; }
echo present
git -C "$d" config --get remote.origin.url || echo
git -C "$d" rev-parse --verify -q HEAD || echo
git -C "$d" config --get cordon.seed.commit || echo
git -C "$d" config --get cordon.seed.ref || echo
`

// holds exits 0 when $2 is an ancestor of HEAD in $1.
const holds = `git -C "$1" merge-base --is-ancestor "$2" HEAD`

// clone clones $1 into a partial directory beside $4 (branch $2 or the
// default; commit $3 checked out when given), records what was seeded,
// and moves it into place; on failure nothing is left.
const clone = `set -e
url=$1 branch=$2 commit=$3 dest=$4 ref=$5
parent=$(dirname "$dest")
mkdir -p "$parent"
part=$(mktemp -d "$parent/.seed-partial-XXXXXX")
trap 'rm -rf "$part"' EXIT
if [ -n "$branch" ]; then
	git clone --quiet --branch "$branch" -- "$url" "$part/repo"
else
	git clone --quiet -- "$url" "$part/repo"
fi
if [ -n "$commit" ]; then
	git -C "$part/repo" checkout --quiet --detach "$commit"
fi
head=$(git -C "$part/repo" rev-parse HEAD)
git -C "$part/repo" config cordon.seed.commit "$head"
git -C "$part/repo" config cordon.seed.ref "$ref"
[ ! -e "$dest" ] || { echo "$dest appeared meanwhile" >&2; exit 3; }
mv "$part/repo" "$dest"
echo "$head"
`

// Ensure makes s's repositories present under root (relative paths are
// the sandbox's workspace's), doing only what is missing.
func Ensure(ctx context.Context, sh Shell, s Seed, root string) ([]Outcome, error) {
	if err := s.Validate(root); err != nil {
		return nil, err
	}
	out := make([]Outcome, len(s.Repositories))
	var missing []int
	var drift []Drift
	for i, r := range s.Repositories {
		dest := path.Join(root, path.Clean(r.Dir))
		stdout, stderr, code, err := sh(ctx, inspect, dest)
		if err != nil {
			return nil, err
		}
		if code != 0 {
			return nil, fmt.Errorf("inspecting %s: exit %d: %s", r.Dir, code, strings.TrimSpace(stderr))
		}
		lines := strings.Split(strings.TrimRight(stdout, "\n"), "\n")
		switch lines[0] {
		case "missing":
			missing = append(missing, i)
			continue
		case "notgit":
			drift = append(drift, Drift{r.Dir, "it exists and is not a git checkout"})
			continue
		}
		for len(lines) < 5 {
			lines = append(lines, "")
		}
		origin, head, recorded, recordedRef := lines[1], lines[2], lines[3], lines[4]
		out[i] = Outcome{Dir: r.Dir, State: "present", Commit: head}
		if origin != r.URL {
			drift = append(drift, Drift{r.Dir, fmt.Sprintf("its origin is %q, the seed names %q", origin, r.URL)})
			continue
		}
		if head == "" {
			drift = append(drift, Drift{r.Dir, "it has no HEAD commit"})
			continue
		}
		want := recorded
		switch ref := refOf(r); {
		case r.Commit != "":
			want = r.Commit // a new pin is drift unless the checkout holds it
		case ref != recordedRef && recordedRef != "":
			drift = append(drift, Drift{r.Dir, fmt.Sprintf("it was seeded from %s, the seed names %s", recordedRef, ref)})
			continue
		}
		if want == "" {
			drift = append(drift, Drift{r.Dir, "it was not seeded (no recorded commit) and the seed pins none"})
			continue
		}
		_, _, code, err = sh(ctx, holds, dest, want)
		if err != nil {
			return nil, err
		}
		if code != 0 {
			drift = append(drift, Drift{r.Dir, fmt.Sprintf("commit %s is not an ancestor of its HEAD %s", want, head)})
		}
	}
	if len(drift) > 0 {
		return nil, &DriftError{drift}
	}
	for _, i := range missing {
		r := s.Repositories[i]
		dest := path.Join(root, path.Clean(r.Dir))
		stdout, stderr, code, err := sh(ctx, clone, r.URL, r.Branch, r.Commit, dest, refOf(r))
		if err != nil {
			return out, err
		}
		if code != 0 {
			return out, fmt.Errorf("cloning %s into %s: exit %d: %s", r.URL, r.Dir, code, lastLine(stderr))
		}
		out[i] = Outcome{Dir: r.Dir, State: "cloned", Commit: strings.TrimSpace(stdout)}
	}
	return out, nil
}

func refOf(r Repository) string {
	switch {
	case r.Commit != "":
		return "commit " + r.Commit
	case r.Branch != "":
		return "branch " + r.Branch
	}
	return "the default branch"
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 500 {
		s = s[:500]
	}
	return s
}
