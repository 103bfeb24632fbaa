package sandbox

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cordon-sandbox/cordon/image"
)

func (p *Provider) imageStore() (*image.Store, error) {
	p.imagesOnce.Do(func() {
		if p.images == nil {
			dir := p.imageDir
			if dir == "" {
				dir = image.DefaultDir()
			}
			p.images, p.imagesErr = image.Open(dir, image.DefaultLimits)
		}
	})
	return p.images, p.imagesErr
}

// rootFromImage resolves spec.Image to a cached root filesystem (pulling it
// when it is not cached) and holds it until release is called.
func (p *Provider) rootFromImage(ctx context.Context, ref string) (string, func(), error) {
	st, err := p.imageStore()
	if err != nil {
		return "", nil, err
	}
	root, release, err := st.Acquire(ref)
	if errors.Is(err, image.ErrNotFound) {
		if _, err = st.Pull(ctx, ref); err != nil {
			return "", nil, err
		}
		root, release, err = st.Acquire(ref)
	}
	return root, release, err
}

// imageRoot gives spec its image's root filesystem (held until release)
// and the image's defaults.
func (p *Provider) imageRoot(ctx context.Context, spec Spec) (Spec, func(), error) {
	root, release, err := p.rootFromImage(ctx, spec.Image)
	if err != nil {
		return spec, nil, fmt.Errorf("image %s: %w", spec.Image, err)
	}
	spec.RootFS = root
	if st, err := p.imageStore(); err == nil {
		if rec, err := st.Resolve(spec.Image); err == nil {
			if spec, err = withImageDefaults(spec, rec, root); err != nil {
				release()
				return spec, nil, err
			}
		}
	}
	return spec, release, nil
}

// withImageDefaults gives spec what its image's config sets and the spec
// does not: each variable of the image's Env, and its User (a uid, or a
// name looked up in the image's /etc/passwd). The image's root user is
// not taken: a sandbox's workload runs unprivileged unless its spec says
// otherwise. The image's WorkingDir is not taken either: commands start in
// the workspace, the one place the sandbox may write.
func withImageDefaults(spec Spec, rec *image.Record, root string) (Spec, error) {
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
