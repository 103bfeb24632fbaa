package docker

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEngineAddress: the engine is found as the docker CLI finds it:
// DOCKER_HOST, then the current context (DOCKER_CONTEXT or the
// configuration's), then the default socket; a remote engine or a context
// that names none is refused.
func TestEngineAddress(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("DOCKER_CONFIG", dir)
	t.Setenv("DOCKER_HOST", "")
	t.Setenv("DOCKER_CONTEXT", "")
	context := func(name, host string) {
		sum := sha256.Sum256([]byte(name))
		d := filepath.Join(dir, "contexts", "meta", hex.EncodeToString(sum[:]))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		meta := `{"Name":"` + name + `","Endpoints":{"docker":{"Host":"` + host + `"}}}`
		if err := os.WriteFile(filepath.Join(d, "meta.json"), []byte(meta), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	host := func() (string, error) {
		e, err := newEngine("")
		if err != nil {
			return "", err
		}
		return e.host, nil
	}
	if h, err := host(); err != nil || h != "unix:///var/run/docker.sock" {
		t.Fatalf("default: %q %v", h, err)
	}
	context("rootless", "unix:///run/user/1000/docker.sock")
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"currentContext":"rootless"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if h, err := host(); err != nil || h != "unix:///run/user/1000/docker.sock" {
		t.Fatalf("current context: %q %v", h, err)
	}
	context("other", "unix:///tmp/other.sock")
	t.Setenv("DOCKER_CONTEXT", "other")
	if h, err := host(); err != nil || h != "unix:///tmp/other.sock" {
		t.Fatalf("DOCKER_CONTEXT: %q %v", h, err)
	}
	t.Setenv("DOCKER_HOST", "unix:///tmp/explicit.sock")
	if h, err := host(); err != nil || h != "unix:///tmp/explicit.sock" {
		t.Fatalf("DOCKER_HOST first: %q %v", h, err)
	}
	t.Setenv("DOCKER_HOST", "tcp://192.0.2.1:2376")
	if _, err := host(); err == nil || !strings.Contains(err.Error(), "not on this host") {
		t.Fatalf("a remote engine: %v", err)
	}
	t.Setenv("DOCKER_HOST", "")
	t.Setenv("DOCKER_CONTEXT", "missing")
	if _, err := host(); err == nil || !strings.Contains(err.Error(), `"missing"`) {
		t.Fatalf("a missing context: %v", err)
	}
}
