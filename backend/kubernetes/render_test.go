package kubernetes

import (
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/egress"
	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/sandbox"
)

var update = flag.Bool("update", false, "rewrite testdata/*.json from the renderer")

// golden compares v with testdata/name (testutil.Golden).
func golden(t *testing.T, name string, v any) {
	t.Helper()
	testutil.Golden(t, filepath.Join("testdata", name), v, *update)
}

// TestRender pins the pod the baseline renders to, whole: a change to the
// hardening shows here and has to be made on purpose.
func TestRender(t *testing.T) {
	p := render(renderInput{
		Name: "cordon-0123", Image: "example.test/image:1", AgentImage: "example.test/agent:1", UID: 1000,
		Env:    []string{"CORDON_AGENT_WORKSPACE=/workspace", "HOME=/home/sandbox"},
		Limits: sandbox.Limits{MemoryBytes: 512 << 20, CPUs: 1.5}, RuntimeClass: "gvisor", Landlock: "auto",
		Secret: "cordon-0123", Labels: map[string]string{LabelTier: Name, LabelOwner: "cordon", LabelSandbox: "cordon-0123"},
	})
	golden(t, "pod.json", p)
	// With the agent in the image: no init container, nothing else
	// changed but what they were for.
	in := p.Spec.Containers[0]
	q := render(renderInput{
		Name: "cordon-0123", Image: "example.test/image:1", AgentInImage: "/usr/local/bin/cordon-agent", UID: 1000,
		Env:    []string{"CORDON_AGENT_WORKSPACE=/workspace", "HOME=/home/sandbox"},
		Limits: sandbox.Limits{MemoryBytes: 512 << 20, CPUs: 1.5}, RuntimeClass: "gvisor", Landlock: "auto",
		Secret: "cordon-0123", Labels: map[string]string{LabelTier: Name, LabelOwner: "cordon", LabelSandbox: "cordon-0123"},
	})
	if len(q.Spec.InitContainers) != 0 || q.Spec.Containers[0].Command[0] != "/usr/local/bin/cordon-agent" || len(q.Spec.Volumes) != len(p.Spec.Volumes)-2 {
		t.Errorf("with the agent in the image: %+v", q.Spec)
	}
	out := q.Spec.Containers[0]
	a, _ := json.Marshal(in.SecurityContext)
	b, _ := json.Marshal(out.SecurityContext)
	if string(a) != string(b) || len(out.Env) != len(in.Env) {
		t.Errorf("with the agent in the image the container's security or environment differs")
	}
	for _, e := range p.Spec.Containers[0].Env {
		if strings.Contains(e.Name, "TOKEN") && e.Name != "CORDON_AGENT_TOKEN_FILE" {
			t.Errorf("the token in the environment: %s", e.Name)
		}
	}
}

// TestRenderPolicy pins the network policies: deny-all, allow-all without
// private ranges, and IP and CIDR rules; a rule naming a host is refused
// with its name.
func TestRenderPolicy(t *testing.T) {
	labels := map[string]string{LabelSandbox: "cordon-0123"}
	var all []*networkPolicy
	for _, c := range []struct {
		mode  egress.Mode
		rules []egress.Rule
	}{
		{egress.DenyAll, nil},
		{egress.AllowAll, nil},
		{egress.Static, []egress.Rule{{Host: "203.0.113.7"}, {Host: "198.51.100.0/24", Ports: []int{5432}}, {Host: "2001:db8::1/64", Ports: []int{443}}}},
	} {
		np, err := renderPolicy("cordon-0123", labels, c.rules, c.mode, nil)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, np)
	}
	from, err := ParsePeer("cordon-system/app=cordon")
	if err != nil {
		t.Fatal(err)
	}
	np, err := renderPolicy("cordon-0123", labels, nil, egress.DenyAll, from)
	if err != nil {
		t.Fatal(err)
	}
	all = append(all, np)
	golden(t, "policies.json", all)
	for _, bad := range []string{"cordon-system", "/app=cordon", "cordon-system/app"} {
		if _, err := ParsePeer(bad); err == nil {
			t.Errorf("ParsePeer(%q) took it", bad)
		}
	}
	_, err = renderPolicy("cordon-0123", labels, []egress.Rule{{Host: "api.example.test"}}, egress.Static, nil)
	var u *sandbox.UnsupportedError
	if !errors.As(err, &u) || !strings.Contains(err.Error(), "api.example.test") {
		t.Fatalf("a named host: %v", err)
	}
}

func TestQuantity(t *testing.T) {
	for n, want := range map[int64]string{1 << 30: "1Gi", 512 << 20: "512Mi", 3 << 10: "3Ki", 1000: "1000"} {
		if got := quantity(n); got != want {
			t.Errorf("quantity(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestKubeconfig reads a kubeconfig's current context, with paths
// relative to the file and data inline, and refuses what it cannot follow
// with what to do.
func TestKubeconfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	path := write("config", `apiVersion: v1
kind: Config
current-context: b
clusters:
- name: one
  cluster: {server: "https://192.0.2.1:6443/", insecure-skip-tls-verify: true}
contexts:
- name: a
  context: {cluster: one, user: u1}
- name: b
  context: {cluster: one, user: u2, namespace: sandboxes}
users:
- name: u1
  user: {token: secret-one}
- name: u2
  user: {tokenFile: tok}
- name: plugin
  user: {exec: {command: aws}}
`)
	c, err := loadKubeconfig("/nonexistent.test:"+path, "")
	if err != nil {
		t.Fatal(err)
	}
	if c.server != "https://192.0.2.1:6443" || c.namespace != "sandboxes" || c.tokenFile != filepath.Join(dir, "tok") || !c.tls.InsecureSkipVerify {
		t.Fatalf("got %+v", c)
	}
	if c, err = loadKubeconfig(path, "a"); err != nil || c.token != "secret-one" || c.namespace != "" {
		t.Fatalf("context a: %+v %v", c, err)
	}
	if _, err := loadKubeconfig(path, "none"); err == nil || !strings.Contains(err.Error(), "no context none") {
		t.Fatalf("a missing context: %v", err)
	}
	plugin := write("plugin", `current-context: p
clusters: [{name: one, cluster: {server: "https://192.0.2.1"}}]
contexts: [{name: p, context: {cluster: one, user: plugin}}]
users: [{name: plugin, user: {exec: {command: aws}}}]
`)
	if _, err := loadKubeconfig(plugin, ""); err == nil || !strings.Contains(err.Error(), "plugin") {
		t.Fatalf("an exec plugin: %v", err)
	}
}
