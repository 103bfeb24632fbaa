package client_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"strings"

	"github.com/cordon-sandbox/cordon/server/api"
	"github.com/cordon-sandbox/cordon/server/client"
)

// Create a sandbox on the daemon, run a command in it, and remove it.
func Example() {
	ctx := context.Background()
	c, err := client.FromEnvironment() // CORDON_HOST, CORDON_API_KEY
	if err != nil {
		log.Fatal(err)
	}
	sb, err := c.Create(ctx, api.CreateRequest{
		Spec:               api.Spec{Limits: api.Limits{MemoryBytes: 512 << 20}},
		TTLSeconds:         3600,
		IdleTimeoutSeconds: 300,
		Labels:             map[string]string{"agent": "demo"},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Delete(ctx, sb.ID)
	res, err := c.Exec(ctx, sb.ID, "sh", client.ExecOptions{Args: []string{"-c", "echo hello from $(hostname)"}, Stdout: os.Stdout, Stderr: os.Stderr})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("exit", res.ExitCode)
}

// Files travel as raw streams: upload replaces a file atomically, download
// can take a byte range.
func ExampleClient_Upload() {
	ctx := context.Background()
	c, _ := client.New("unix:///run/cordon/cordon.sock", "")
	body := "print('hi')\n"
	if err := c.Upload(ctx, "sbx_0123456789abcdef", "main.py", strings.NewReader(body), int64(len(body))); err != nil {
		log.Fatal(err)
	}
	if _, err := c.Download(ctx, "sbx_0123456789abcdef", "main.py", 0, 0, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// Refusals carry the daemon's stable error codes.
func ExampleIs() {
	c, _ := client.New("unix:///run/cordon/cordon.sock", "")
	_, err := c.Get(context.Background(), "sbx_ffffffffffffffff")
	switch {
	case client.IsNotFound(err):
		fmt.Println("no such sandbox (or another tenant's)")
	case client.Is(err, client.ErrUnauthorized):
		fmt.Println("set CORDON_API_KEY")
	}
}

// A running command is stopped through the cancel route; dropping its
// stream would leave it running.
func ExampleClient_Cancel() {
	ctx := context.Background()
	c, _ := client.FromEnvironment()
	ids := make(chan string, 1)
	go c.Exec(ctx, "sbx_0123456789abcdef", "sleep", client.ExecOptions{Args: []string{"600"}, Started: func(id string) { ids <- id }})
	term, err := c.Cancel(ctx, "sbx_0123456789abcdef", <-ids)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(term.State)
}
