//go:build !cordon_light

package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cordon-sandbox/cordon/backend/kubernetes"
	"github.com/cordon-sandbox/cordon/backend/process"
	"github.com/cordon-sandbox/cordon/egress"
	"github.com/cordon-sandbox/cordon/internal/disk"
	"github.com/cordon-sandbox/cordon/metrics"
	"github.com/cordon-sandbox/cordon/runs"
	"github.com/cordon-sandbox/cordon/sandbox"
	"github.com/cordon-sandbox/cordon/server"
)

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

// defaultStateDir is where the daemon keeps its registry.
func defaultStateDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/cordon"
	}
	if d, err := os.UserConfigDir(); err == nil {
		return filepath.Join(filepath.Dir(d), ".local", "state", "cordon")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("cordon-%d", os.Geteuid()))
}

func serveCmd(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: cordon serve [flags]\n\nRuns the daemon: cordon's REST API (/v1, described at /v1/openapi.yaml) for\nmany callers. It listens on a unix socket by default, whose file mode is\nthe boundary: a request there without a key acts as the local\nadministrator. A TCP listener needs API keys (--admin-key-file, then POST\n/v1/keys) and takes TLS with --tls-cert and --tls-key. Sandboxes outlive the\ndaemon: a restart takes them back. They live in /run/cordon/serve (as root;\n$CORDON_STATE_DIR/serve when set), which belongs to one registry\n(--state-dir): a second daemon on one host needs a CORDON_STATE_DIR of its\nown. CORDON_OCI_RUNTIME (crun, runc or a path) chooses the container\ntier's runtime; a change of it between two starts loses no sandbox.\n\nflags:\n")
		printDefaults(fs)
	}
	var listen, hostPaths, profiles listFlag
	fs.Var(&listen, "listen", "an address to serve: `unix:///path` or tcp://host:port; repeatable (default unix://"+defaultSocket()+")")
	stateDir := fs.String("state-dir", defaultStateDir(), "`DIR` for the daemon's registry")
	adminKeyFile := fs.String("admin-key-file", "", "install the admin API key read from `FILE` (at least 32 characters)")
	tlsCert := fs.String("tls-cert", "", "TLS certificate `FILE` for tcp listeners")
	tlsKey := fs.String("tls-key", "", "TLS key `FILE` for tcp listeners")
	var portsURL string
	fs.Func("ports-url", "give each exposed port an origin of its own, `URL` scheme://*.DOMAIN[:PORT], a wildcard name that reaches the daemon (default on a loopback tcp listener without TLS: http://*.localhost:PORT; without one, ports share the daemon's origin, where their pages run sandboxed)", func(v string) error {
		portsURL = v
		return server.CheckPortsURL(v)
	})
	fs.Var(&hostPaths, "host-path", "let callers name host directories under `DIR` (root filesystems, layout mounts); repeatable")
	fs.Var(&profiles, "egress-profile", "offer the egress profile in `FILE` (JSON) to creates by its name; repeatable")
	defTTL := duration(fs, "default-ttl", 0, "TTL of a sandbox whose create gives none (0: none)")
	maxTTL := duration(fs, "max-ttl", 0, "the longest TTL a sandbox may have, and the TTL of one whose create asks for none where --default-ttl is 0 (0: no limit)")
	maxExec := duration(fs, "max-exec-timeout", server.DefaultMaxExecTimeout, "the longest timeout a create may let its commands ask for (its maxTimeoutMs)")
	idle := duration(fs, "idle-timeout", 0, "reap a sandbox after this long without activity inside, unless its create says otherwise (0: never)")
	metricsEvery := duration(fs, "metrics-interval", server.DefaultMetricsInterval, "read every running sandbox's metrics this often, for their history (GET …/metrics/history; 100ms or more; 0: keep none)")
	metricsFor := duration(fs, "metrics-history", server.DefaultMetricsHistory, "how far back a sandbox's metrics history goes (at most "+strconv.Itoa(server.MaxMetricsReadings)+" readings)")
	maxSandboxes := fs.Int("max-sandboxes", 0, "live sandboxes per tenant (default 100)")
	ephemeral := fs.Bool("ephemeral", false, "destroy every sandbox when the daemon stops (a private daemon, as cordon mcp starts); they die with it however it ends")
	runBroker := fs.String("run-broker-url", "", "the one broker URL a run's bindings may name (POST /v1/runs; without it bindings are refused)")
	runPool := fs.Int("run-pool", 0, "sandboxes to keep ready for POST /v1/runs of the default memory (0: none)")
	runTier := fs.String("run-tier", "", "the tier of POST /v1/runs' sandboxes (default: the daemon's default)")
	runImage := fs.String("run-image", "", "the image of POST /v1/runs' sandboxes, holding deno and python3 on its PATH (default: the tier's root)")
	maxDiskSize := size(fs, "max-disk-size", 64<<30, false, "the largest disk quota a persistent workspace may ask for (limits.diskBytes), e.g. 64g; disks are sparse images, which together may promise more than the host holds")
	diskSize := size(fs, "disk-size", sandbox.DefaultDiskBytes, false, "the disk quota of a persistent workspace whose spec gives no limits.diskBytes, e.g. 4g (process, container and gvisor tiers; a sparse image under --state-dir/disks)")
	defPids := fs.Int64("default-pids", server.DefaultPids, "the pids limit of a sandbox whose create gives none, with the agent's reserve on top (0: none, only the tier's task ceiling)")
	defDisk := size(fs, "default-disk", server.DefaultDisk, true, "the writable space of a sandbox whose create gives neither limits.diskBytes nor limits.memoryBytes, e.g. 1g (0: half the host's memory)")
	defMemory := size(fs, "default-memory", 0, true, "the memory limit of a sandbox whose create gives none, e.g. 2g (0: none)")
	defCPUs := fs.Float64("default-cpus", 0, "the CPU limit, in cores, of a sandbox whose create gives none (0: none)")
	diskStore := size(fs, "max-disk-store", 256<<30, false, "what one tenant's persistent workspaces' disk quotas may add up to, e.g. 256g")
	snapStore := size(fs, "max-snapshot-store", 64<<30, false, "what one tenant's snapshots may hold on disk together, compressed as stored, e.g. 64g")
	prestart := fs.Int("prestart", 2, "process-tier inits to keep started and waiting for a create (a few MiB each; 0: none)")
	kube := kubeConfig()
	fs.StringVar(&kube.Kubeconfig, "kubeconfig", "", "the kubernetes tier's cluster: a kubeconfig `FILE` (default: KUBECONFIG, ~/.kube/config, then the pod's service account)")
	fs.StringVar(&kube.Context, "kube-context", "", "the kubeconfig's `CONTEXT` (default: its current one)")
	fs.StringVar(&kube.Namespace, "kube-namespace", kube.Namespace, "the `NAMESPACE` of the sandboxes' pods (default: the context's, or default; CORDON_KUBE_NAMESPACE)")
	fs.StringVar(&kube.Image, "kube-image", kube.Image, "the `IMAGE` of a pod whose create names none (default "+kubernetes.DefaultImage+"; CORDON_KUBE_IMAGE)")
	fs.StringVar(&kube.AgentImage, "kube-agent-image", kube.AgentImage, "the `IMAGE` holding cordon-agent at /cordon-agent (default "+kubernetes.DefaultAgentImage+"; CORDON_KUBE_AGENT_IMAGE)")
	fs.StringVar(&kube.AgentInImage, "kube-agent-in-image", kube.AgentInImage, "every sandbox image holds cordon-agent at `PATH` (and the sandbox user): pods without init containers, which start about a second sooner each (CORDON_KUBE_AGENT_IN_IMAGE)")
	fs.Func("kube-agent-ingress", "admit connections to the sandboxes' agents only from the daemon's own pods, `NAMESPACE/KEY=VALUE[,...]` (when the daemon runs in the cluster; CORDON_KUBE_AGENT_INGRESS)", func(v string) (err error) {
		kube.AgentIngress, err = kubernetes.ParsePeer(v)
		return err
	})
	fs.StringVar(&kube.StorageClass, "kube-storage-class", kube.StorageClass, "the StorageClass `NAME` of persistent workspaces' claims (default: the cluster's; CORDON_KUBE_STORAGE_CLASS)")
	fs.StringVar(&kube.RuntimeClass, "kube-runtime-class", kube.RuntimeClass, "the pods' RuntimeClass `NAME`, gvisor or kata (default: the cluster's; CORDON_KUBE_RUNTIME_CLASS)")
	fs.BoolVar(&kube.NetworkPolicy, "kube-network-policy", kube.NetworkPolicy, "the cluster's network plugin enforces NetworkPolicy, a pod's only egress boundary: without it the tier refuses every sandbox (CORDON_KUBE_NETWORK_POLICY=enforced)")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if len(listen) == 0 {
		listen = listFlag{"unix://" + defaultSocket()}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "cordon serve: "+format+"\n", a...)
		return exitCordon
	}
	profs := map[string]egress.Profile{}
	for _, f := range profiles {
		b, err := os.ReadFile(f)
		if err != nil {
			return fail("%v", err)
		}
		var p egress.Profile
		if err := json.Unmarshal(b, &p); err != nil {
			return fail("egress profile %s: %v", f, err)
		}
		if err := p.Validate(); err != nil {
			return fail("egress profile %s: %v", f, err)
		}
		profs[p.Name] = p
	}

	reg := metrics.NewRegistry()
	// Refusals join their sandbox's events once the daemon exists (no
	// sandbox, and so no decision, comes before).
	var events atomic.Pointer[server.Server]
	proxy := egress.New(egress.Config{Registry: reg, Audit: os.Stderr, OnRecord: func(r egress.Record) {
		if srv := events.Load(); srv != nil {
			srv.EgressRecord(r)
		}
	}})
	// The daemon's sandboxes live in a directory of their own: at start it
	// removes every sandbox there that its registry does not explain, which
	// must never touch a `cordon run` sandbox, nor another daemon's (the
	// directory is this daemon's registry's alone: claimSandboxDir).
	processDir := os.Getenv("CORDON_STATE_DIR")
	if processDir == "" {
		processDir = process.New(process.Config{}).StateDir()
	}
	processDir = filepath.Join(processDir, "serve")
	if err := os.MkdirAll(processDir, 0o711); err != nil {
		return fail("%v", err)
	}
	if m := process.SlowCgroupMoves(); m != "" && os.Geteuid() == 0 {
		log.Warn("cgroup2 is mounted without favordynmods: every sandbox create waits for an RCU grace period (about 10 ms on small VMs); systemd 253+ sets it, or: mount -o remount,favordynmods "+m, "mount", m)
	}
	if *diskSize < disk.MinBytes {
		return fail("--disk-size %s: at least 16m", humanSize(*diskSize))
	}
	if *maxDiskSize < *diskSize {
		return fail("--max-disk-size %s: at least --disk-size (%s)", humanSize(*maxDiskSize), humanSize(*diskSize))
	}
	switch {
	case *metricsEvery == 0:
		*metricsEvery = -1 // no history
	case *metricsEvery < 100*time.Millisecond:
		return fail("--metrics-interval %v: 100ms or more, or 0 for no history", *metricsEvery)
	case *metricsFor <= 0 || *metricsFor / *metricsEvery > server.MaxMetricsReadings:
		return fail("--metrics-history %v: more than 0, and at most %d readings of --metrics-interval (%v)", *metricsFor, server.MaxMetricsReadings, *metricsEvery)
	}
	if *maxTTL > 0 && *defTTL > *maxTTL {
		return fail("--default-ttl %v: at most --max-ttl (%v)", *defTTL, *maxTTL)
	}
	defaults, err := defaultLimits(*defPids, *defDisk, *defMemory, *defCPUs)
	if err != nil {
		return fail("%v", err)
	}
	if *prestart < 0 || *prestart > 64 {
		return fail("--prestart %d: 0 to 64", *prestart)
	}
	owner, err := registryOwner(*stateDir)
	if err != nil {
		return fail("%v", err)
	}
	lock, err := claimSandboxDir(processDir, *stateDir, owner, !*ephemeral)
	if err != nil {
		return fail("%v", err)
	}
	defer lock.Close()
	tiers := backends(processDir, &daemonTiers{prestart: *prestart, kube: kube, ephemeral: *ephemeral, owner: owner})
	provider := sandbox.NewProvider(tiers, sandbox.WithDefaultTier(defaultTier), sandbox.WithImages(&imageCache{dir: imageDir(), st: imageStore()}), sandbox.WithEgressProxy(proxy), sandbox.WithLogger(log),
		sandbox.WithDisks(filepath.Join(*stateDir, "disks"), *diskSize), sandbox.WithDefaultLimits(defaults))
	var adminKey string
	if *adminKeyFile != "" {
		b, err := os.ReadFile(*adminKeyFile)
		if err != nil {
			return fail("admin key: %v", err)
		}
		adminKey = strings.TrimSpace(string(b))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	err = server.RunDaemon(ctx, server.DaemonConfig{
		Server: server.Config{
			Provider: provider, StateDir: *stateDir, HostPaths: hostPaths, Profiles: profs,
			DefaultTTL: *defTTL, MaxTTL: *maxTTL, DefaultIdleTimeout: *idle, MaxExecTimeout: *maxExec,
			MetricsInterval: *metricsEvery, MetricsHistory: *metricsFor,
			Limits:   server.Limits{MaxSandboxesPerTenant: *maxSandboxes, MaxDiskBytes: *maxDiskSize, MaxSnapshotStorePerTenant: *snapStore, MaxDiskStorePerTenant: *diskStore},
			Registry: reg, Log: log,
			Runs:     runs.NewRunner(runs.Config{Tier: *runTier, Image: *runImage, BrokerURL: *runBroker, Egress: proxy, Log: log}),
			RunPool:  *runPool,
			PortsURL: portsURL,
		},
		Listen: listen, TLSCert: *tlsCert, TLSKey: *tlsKey, AdminKey: adminKey, Backends: tiers,
		Started:   func(srv *server.Server) { events.Store(srv) },
		Ephemeral: *ephemeral,
	})
	if err != nil {
		return fail("%v", err)
	}
	return 0
}

// defaultLimits reads cordon serve's default limits, each in the range a
// create's own may take.
func defaultLimits(pids, disk, memory int64, cpus float64) (sandbox.Limits, error) {
	l := sandbox.Limits{Pids: pids, CPUs: cpus, DiskBytes: disk, MemoryBytes: memory}
	spec := sandbox.Spec{Limits: l}
	if l.MemoryBytes > 0 {
		// The disk default is held to a memory default (WithDefaultLimits).
		spec.Limits.DiskBytes = min(l.DiskBytes, l.MemoryBytes)
	}
	if err := spec.Validate(); err != nil {
		return l, fmt.Errorf("the default limits (--default-pids, --default-disk, --default-memory, --default-cpus): %v", err)
	}
	return l, nil
}
