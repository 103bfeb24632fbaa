package main_test

import (
	"bufio"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestPortForward: a dev server started detached inside a sandbox (which
// has no network interface) is reached from the host through cordon
// port-forward: an HTTP GET answers with the server's page, many times
// over; a port nobody listens on inside fails the connection, not cordon.
func TestPortForward(t *testing.T) {
	id, host, run := daemonSandbox(t)
	if _, errOut, code := run("exec", id, "--", "sh", "-c", "mkdir -p site && echo hello-from-inside > site/index.html"); code != 0 {
		t.Fatalf("exec: %s", errOut)
	}
	if _, errOut, code := run("exec", "-d", "--name", "web", "--cwd", "site", id, "--", "python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"); code != 0 {
		t.Fatalf("exec -d: %s", errOut)
	}
	pf := exec.Command(buildCLI(t), "port-forward", host, id, "0:8000", "0:8001")
	out, err := pf.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := pf.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pf.Process.Kill(); _ = pf.Wait() }()
	lines := bufio.NewScanner(out)
	var addrs []string
	for len(addrs) < 2 && lines.Scan() {
		// "Forwarding from 127.0.0.1:PORT -> 8000"
		f := strings.Fields(lines.Text())
		if len(f) == 5 {
			addrs = append(addrs, f[2])
		}
	}
	if len(addrs) != 2 {
		t.Fatalf("port-forward printed %v", addrs)
	}
	get := func(addr string) (string, error) {
		resp, err := http.Get("http://" + addr + "/index.html")
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	var body string
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if body, err = get(addrs[0]); err == nil && body == "hello-from-inside\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("through the forward: %q %v", body, err)
		}
	}
	for range 20 {
		if body, err := get(addrs[0]); err != nil || body != "hello-from-inside\n" {
			t.Fatalf("again: %q %v", body, err)
		}
	}
	if _, err := get(addrs[1]); err == nil {
		t.Fatal("a port nobody listens on inside answered")
	}
}
