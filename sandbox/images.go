package sandbox

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Images is where sandboxes' images come from (WithImages): in cordon, the
// image cache (package image). The sandbox core knows it only through this,
// so that a program that runs no image (a `cordon run` of the process
// tier) does not link, and start, a registry client.
type Images interface {
	// Root holds ref's root filesystem, pulling the image where it is not
	// cached, until release is called, and says what the image's config
	// sets.
	Root(ctx context.Context, ref string) (root string, release func(), cfg ImageConfig, err error)
}

// ImageConfig is what an image's config sets that a sandbox of it takes.
type ImageConfig struct {
	Env  []string // KEY=VALUE
	User string   // a uid or a name, as the config has it (a ":group" is ignored)
}

// rootFromImage holds ref's root filesystem until release is called.
func (p *Provider) rootFromImage(ctx context.Context, ref string) (string, func(), ImageConfig, error) {
	if p.images == nil {
		return "", nil, ImageConfig{}, fmt.Errorf("%w: images (this provider was given no image cache)", ErrUnsupported)
	}
	return p.images.Root(ctx, ref)
}

// imageRoot gives spec its image's root filesystem (held until release)
// and the image's defaults.
func (p *Provider) imageRoot(ctx context.Context, spec Spec) (Spec, func(), error) {
	root, release, cfg, err := p.rootFromImage(ctx, spec.Image)
	if err != nil {
		return spec, nil, fmt.Errorf("image %s: %w", spec.Image, err)
	}
	spec.RootFS = root
	if spec, err = withImageDefaults(spec, cfg, root); err != nil {
		release()
		return spec, nil, err
	}
	return spec, release, nil
}

// withImageDefaults gives spec what its image's config sets and the spec
// does not: each variable of the image's Env, and its User (a uid, or a
// name looked up in the image's /etc/passwd). The image's root user is
// not taken: a sandbox's workload runs unprivileged unless its spec says
// otherwise. The image's WorkingDir is not taken either: commands start in
// the workspace, the one place the sandbox may write.
func withImageDefaults(spec Spec, rec ImageConfig, root string) (Spec, error) {
	if len(rec.Env) > 0 {
		env := make(map[string]string, len(spec.Env)+len(rec.Env))
		for _, kv := range rec.Env {
			// What no spec may set (the agent's own prefix, NUL bytes)
			// is not taken from an image either.
			if k, v, ok := strings.Cut(kv, "="); ok && k != "" && !strings.HasPrefix(k, "CORDON_AGENT_") && !strings.ContainsRune(kv, 0) {
				env[k] = v
			}
		}
		maps.Copy(env, spec.Env)
		spec.Env = env
	}
	if spec.User == nil && rec.User != "" {
		name, _, _ := strings.Cut(rec.User, ":")
		uid, err := strconv.Atoi(name)
		if err != nil {
			if uid, err = passwdUID(filepath.Join(root, "etc", "passwd"), name); err != nil {
				return spec, fmt.Errorf("%w: the image's user %q: %v", ErrInvalidSpec, rec.User, err)
			}
		}
		if uid > 0 {
			spec.User = &uid
		}
	}
	return spec, nil
}

// passwdUID finds name's uid in a passwd file.
func passwdUID(path, name string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) > 2 && fields[0] == name {
			return strconv.Atoi(fields[2])
		}
	}
	return 0, fmt.Errorf("not in the image's /etc/passwd")
}
