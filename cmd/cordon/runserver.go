//go:build !cordon_light

package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/cordon-sandbox/cordon/runs"
	sclient "github.com/cordon-sandbox/cordon/server/client"
)

// runServerCmd serves the run API in front of a daemon: cordon's POST
// /v1/runs, and the questpie server's POST /run and GET /health with its
// admission, configured by the same environment (SANDBOX_*), so that a
// questpie host points at it unchanged.
func runServerCmd(args []string) int {
	fs := flag.NewFlagSet("run-server", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `usage: cordon run-server [flags]

Serves the one-shot run API (docs/runs.md) in front of a daemon: POST
/v1/runs (to callers bearing the --token-file token), and POST /run and
GET /health as @questpie/sandbox's server answers them. Admission of /run requests is configured as that server's:
SANDBOX_HOST_ADMISSION_SECRET, SANDBOX_WORKLOAD_ADMISSION_SECRET,
SANDBOX_WORKLOAD_ADMISSION_KEY_ID, SANDBOX_INSTANCE_ID, and the one broker
URL bindings may name, SANDBOX_BROKER_URL. Every run takes a fresh sandbox
from the daemon (--host, CORDON_HOST, else its default socket, with
CORDON_API_KEY), so the daemon's tenants, pools, tiers and egress boundary
apply.

flags:
`)
		printDefaults(fs)
	}
	port := cmp.Or(os.Getenv("PORT"), "8787")
	listen := fs.String("listen", "127.0.0.1:"+port, "the `HOST:PORT` to serve (default port: $PORT, else 8787)")
	tier := fs.String("tier", "", "the sandboxes' tier (default: the daemon's default)")
	img := fs.String("image", "", "the sandboxes' image, holding deno and python3 on its PATH (default: the tier's root)")
	tokenFile := fs.String("token-file", "", "serve POST /v1/runs to callers bearing the token in `FILE` (at least 32 characters; without it that route is refused)")
	broker := fs.String("broker-url", os.Getenv("SANDBOX_BROKER_URL"), "the one broker `URL` a run's bindings may name (default $SANDBOX_BROKER_URL; without it bindings are refused)")
	d, rest, code := daemonClient(fs, args)
	if d == nil {
		return code
	}
	if len(rest) > 0 {
		fmt.Fprintf(os.Stderr, "cordon run-server: unexpected arguments %q\n", rest)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	adm := &runs.Admission{
		HostSecret:     strings.TrimSpace(os.Getenv("SANDBOX_HOST_ADMISSION_SECRET")),
		WorkloadSecret: strings.TrimSpace(os.Getenv("SANDBOX_WORKLOAD_ADMISSION_SECRET")),
		KeyID:          cmp.Or(strings.TrimSpace(os.Getenv("SANDBOX_WORKLOAD_ADMISSION_KEY_ID")), runs.DefaultKeyID),
		InstanceID:     strings.TrimSpace(os.Getenv("SANDBOX_INSTANCE_ID")),
	}
	if err := adm.Check(); err != nil {
		fmt.Fprintf(os.Stderr, "cordon run-server: %v\n", err)
		return 2
	}
	token := ""
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			fmt.Fprintf(os.Stderr, "cordon run-server: %v\n", err)
			return 2
		}
		if token = strings.TrimSpace(string(b)); len(token) < 32 {
			fmt.Fprintf(os.Stderr, "cordon run-server: the token in %s is shorter than 32 characters\n", *tokenFile)
			return 2
		}
	}
	srv := &runs.Server{Token: token,
		Runner:    runs.NewRunner(runs.Config{Tier: *tier, Image: *img, BrokerURL: strings.TrimSpace(*broker), Log: log}),
		Daemon:    func(*http.Request) (*sclient.Client, error) { return d, nil },
		Admission: adm, Audit: os.Stdout, Log: log,
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cordon run-server: %v\n", err)
		return exitCordon
	}
	fmt.Printf("cordon run-server listening on :%d\n", ln.Addr().(*net.TCPAddr).Port)
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintf(os.Stderr, "cordon run-server: %v\n", err)
		return exitCordon
	}
	return 0
}
