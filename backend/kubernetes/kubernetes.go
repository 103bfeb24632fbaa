package kubernetes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/backend/host"
	"github.com/cordon-sandbox/cordon/baseline"
	"github.com/cordon-sandbox/cordon/egress"
	"github.com/cordon-sandbox/cordon/sandbox"
)

// Backend is the Kubernetes tier.
type Backend struct {
	cfg Config

	once sync.Once
	api  *api
	ns   string
	err  error

	sweepOnce sync.Once
}

var _ sandbox.Backend = (*Backend)(nil)

// The abilities the Kubernetes tier has: its pods outlive the process that
// made them and are taken back by label; the cluster enforces the egress
// policy (a NetworkPolicy), which can be changed in place.
var (
	_ sandbox.Instance       = (*instance)(nil)
	_ sandbox.Persistent     = (*instance)(nil)
	_ sandbox.ExitCoder      = (*instance)(nil)
	_ sandbox.EgressEnforcer = (*instance)(nil)
	_ sandbox.Suspender      = (*instance)(nil)
	_ sandbox.Adopter        = (*Backend)(nil)
	_ sandbox.Closer         = (*Backend)(nil)
)

// New returns the backend.
func New(cfg Config) *Backend {
	if cfg.Image == "" {
		cfg.Image = DefaultImage
	}
	if cfg.AgentImage == "" {
		cfg.AgentImage = DefaultAgentImage
	}
	if cfg.Owner == "" {
		cfg.Owner = "cordon"
	}
	if cfg.GVisorClasses == nil {
		cfg.GVisorClasses = DefaultGVisorClasses
	}
	if cfg.WorkspaceSize == 0 {
		cfg.WorkspaceSize = DefaultWorkspaceSize
	}
	return &Backend{cfg: cfg}
}

func (b *Backend) Name() string { return Name }

// Capabilities: the cluster enforces memory and CPU limits and the
// writable space (memory-backed volumes); images are the cluster's; the
// agent applies Landlock where the node's kernel has it and refuses to
// start where it is required and missing. A pod has no pids limit of its
// own (the kubelet's is per node) and no host directories.
func (b *Backend) Capabilities() sandbox.Capabilities {
	return sandbox.Capabilities{
		Isolated: true, MemoryLimit: true, CPULimit: true, DiskLimit: true,
		EngineImages: true, User: true, Egress: true, Landlock: true, PersistentWorkspace: true, RuntimeClass: true,
	}
}

func (b *Backend) client() (*api, string, error) {
	b.once.Do(func() {
		var c *cluster
		path := b.cfg.Kubeconfig
		if path == "" {
			path = os.Getenv("KUBECONFIG")
		}
		if path == "" {
			if home, err := os.UserHomeDir(); err == nil {
				if _, err := os.Stat(filepath.Join(home, ".kube", "config")); err == nil {
					path = filepath.Join(home, ".kube", "config")
				}
			}
		}
		if path != "" {
			c, b.err = loadKubeconfig(path, b.cfg.Context)
		} else {
			c, b.err = inCluster()
		}
		if b.err != nil {
			return
		}
		b.ns = b.cfg.Namespace
		if b.ns == "" {
			b.ns = c.namespace
		}
		if b.ns == "" {
			b.ns = "default"
		}
		b.api = newAPI(c)
	})
	return b.api, b.ns, b.err
}

// Probe checks the cluster answers and that its network plugin is said to
// enforce NetworkPolicy.
func (b *Backend) Probe(ctx context.Context) error {
	api, _, err := b.client()
	if err != nil {
		return fmt.Errorf("%w: kubernetes: %v", sandbox.ErrUnavailable, err)
	}
	if err := api.ready(ctx); err != nil {
		return fmt.Errorf("%w: kubernetes: the API server: %v", sandbox.ErrUnavailable, err)
	}
	if !b.cfg.NetworkPolicy {
		return fmt.Errorf("%w: kubernetes: nothing says the cluster enforces NetworkPolicy, which is a sandbox's only egress boundary there; once its network plugin does (Calico, Cilium, kube-router), say so (cordon serve --kube-network-policy, CORDON_KUBE_NETWORK_POLICY=enforced)", sandbox.ErrUnavailable)
	}
	return nil
}

// Close releases the API client.
func (b *Backend) Close() error {
	if b.api != nil {
		b.api.close()
	}
	return nil
}

// Start makes the sandbox's NetworkPolicy and token Secret, then its pod,
// gives both to the pod (so that the cluster collects them with it), and
// waits for the pod's address.
func (b *Backend) Start(ctx context.Context, l sandbox.Launch) (sandbox.Instance, error) {
	if err := b.Probe(ctx); err != nil {
		return nil, err
	}
	api, ns, _ := b.client()
	spec := l.Spec
	uid := baseline.DefaultUID
	if spec.User != nil {
		uid = *spec.User
	}
	if uid == 0 {
		return nil, &sandbox.UnsupportedError{Tier: Name, What: "commands as root (a pod's root is the node's: the tier runs commands as an unprivileged user)"}
	}
	if !b.cfg.Detached {
		b.sweepOnce.Do(func() { b.sweepEnded(ctx) })
		if v := l.AgentEnv["IDLE_TIMEOUT_MS"]; v == "" || v == "0" {
			l.AgentEnv = maps.Clone(l.AgentEnv)
			if l.AgentEnv == nil {
				l.AgentEnv = map[string]string{}
			}
			l.AgentEnv["IDLE_TIMEOUT_MS"] = strconv.FormatInt(UnattendedIdle.Milliseconds(), 10)
		}
	}
	policy := egress.Policy{Mode: egress.DenyAll}
	if spec.Egress != nil {
		policy = *spec.Egress
	}
	np, err := b.policy(ctx, "", policy)
	if err != nil {
		return nil, err
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	name := "cordon-" + hex.EncodeToString(rnd[:])
	labels := map[string]string{LabelTier: Name, LabelOwner: b.cfg.Owner, LabelSandbox: name}
	inst := &instance{b: b, name: name, uid: uid, exited: make(chan struct{})}
	inst.exitCode.Store(-1)
	fail := func(err error) (sandbox.Instance, error) {
		return nil, errors.Join(err, inst.Destroy(context.WithoutCancel(ctx)))
	}
	// The policy comes first: the pod never runs without it.
	np.Metadata.Name, np.Metadata.Labels = name, labels
	np.Spec.PodSelector.MatchLabels = map[string]string{LabelSandbox: name}
	if err := api.create(ctx, ns, "networkpolicies", np, nil); err != nil {
		return fail(b.apiErr("the network policy", err))
	}
	inst.made.policy = true
	sec := &secret{APIVersion: "v1", Kind: "Secret", Type: "Opaque", Immutable: true,
		Metadata: meta{Name: name, Labels: labels}, Data: map[string][]byte{tokenKey: []byte(l.Token)}}
	if err := api.create(ctx, ns, "secrets", sec, nil); err != nil {
		return fail(b.apiErr("the token's secret", err))
	}
	inst.made.secret = true
	landlock := "auto"
	if spec.RequireLandlock {
		landlock = "require"
	}
	image := spec.Image
	if image == "" {
		image = b.cfg.Image
	}
	runtimeClass := spec.RuntimeClass
	if runtimeClass == "" {
		runtimeClass = b.cfg.RuntimeClass
	}
	// A persistent workspace is a claim of its own, which then owns the
	// secret and the policy: they outlive a suspension's pod with it.
	var ownerRefs []ownerRef
	claimName := ""
	if spec.PersistentWorkspace {
		claimName = name
		size := b.cfg.WorkspaceSize
		if d := spec.Limits.DiskBytes; d > 0 {
			size = d
		}
		c := &claim{APIVersion: "v1", Kind: "PersistentVolumeClaim", Metadata: meta{Name: name, Labels: labels},
			Spec: claimSpec{AccessModes: []string{"ReadWriteOnce"}, StorageClassName: b.cfg.StorageClass,
				Resources: resources{Requests: map[string]string{"storage": quantity(size)}}}}
		var made claim
		if err := api.create(ctx, ns, "persistentvolumeclaims", c, &made); err != nil {
			return fail(b.apiErr("the workspace's claim", err))
		}
		inst.made.claim = true
		ownerRefs = []ownerRef{{APIVersion: "v1", Kind: "PersistentVolumeClaim", Name: name, UID: made.Metadata.UID}}
	}
	inst.pod = render(renderInput{
		Name: name, Image: image, AgentImage: b.cfg.AgentImage, AgentInImage: b.cfg.AgentInImage, UID: uid,
		Env:    host.AgentEnv(l, uid, nil, host.AgentEnvOptions{PodNetwork: true}),
		Limits: spec.Limits, RuntimeClass: runtimeClass, Landlock: landlock, Secret: name, Labels: labels,
		GVisor: slices.Contains(b.cfg.GVisorClasses, runtimeClass),
		Claim:  claimName,
	})
	inst.token = l.Token
	uidOf, err := inst.run(ctx)
	if err != nil {
		return fail(err)
	}
	if ownerRefs == nil {
		ownerRefs = []ownerRef{{APIVersion: "v1", Kind: "Pod", Name: name, UID: uidOf}}
	}
	owner := map[string]any{"metadata": map[string]any{"ownerReferences": ownerRefs}}
	for _, kind := range []string{"secrets", "networkpolicies"} {
		if err := api.patch(ctx, ns, kind, name, owner, nil); err != nil {
			return fail(b.apiErr("giving the "+kind+" to its owner", err))
		}
	}
	if err := inst.ready(ctx); err != nil {
		return fail(err)
	}
	return inst, nil
}

// run creates the instance's pod and returns its uid; ready then waits
// for its address.
func (i *instance) run(ctx context.Context) (string, error) {
	api, ns, _ := i.b.client()
	var made pod
	if err := api.create(ctx, ns, "pods", i.pod, &made); err != nil {
		return "", i.b.apiErr("the pod", err)
	}
	i.made.pod = true
	i.rv = made.Metadata.ResourceVersion
	return made.Metadata.UID, nil
}

// ready waits for the pod run made to have an address, and watches it
// from then on (a generation of its own: a suspension's end of the pod
// is not the agent's exit).
func (i *instance) ready(ctx context.Context) error {
	ip, err := i.awaitAddress(ctx, i.rv)
	if err != nil {
		return err
	}
	i.mu.Lock()
	i.ep = client.Endpoint{Network: "tcp", Address: net.JoinHostPort(ip, strconv.Itoa(AgentPort)), Token: i.token}
	i.mu.Unlock()
	go i.watch(i.rv, i.gen.Load())
	return nil
}

// Suspend deletes the pod, which the kubelet stops, and keeps the claim,
// the secret and the policy. (The sandbox has quiesced the agent and had
// it flush the workspace first.)
func (i *instance) Suspend(ctx context.Context) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.gone || !i.made.claim {
		return &sandbox.UnsupportedError{Tier: Name, What: "suspending a sandbox without a persistent workspace"}
	}
	i.gen.Add(1) // the pod's end is not the agent's exit
	api, ns, _ := i.b.client()
	if err := api.remove(ctx, ns, "pods", i.name, 1); err != nil {
		return fmt.Errorf("%w: kubernetes: delete pod %s: %v", sandbox.ErrTeardown, i.name, err)
	}
	if err := i.awaitGone(ctx, "pods"); err != nil {
		return err
	}
	i.made.pod = false
	return nil
}

// Wake starts a new pod on the claim.
func (i *instance) Wake(ctx context.Context) error {
	i.mu.Lock()
	if i.gone || i.made.pod || i.pod == nil {
		i.mu.Unlock()
		return fmt.Errorf("%w: kubernetes: %s is not suspended", sandbox.ErrAgent, i.name)
	}
	_, err := i.run(ctx)
	i.mu.Unlock()
	if err != nil {
		return err
	}
	return i.ready(ctx)
}

// apiErr is an error of the API server's, typed: a spec it refused is the
// caller's to fix.
func (b *Backend) apiErr(what string, err error) error {
	var se *statusError
	if errors.As(err, &se) && (se.Code == http.StatusUnprocessableEntity || se.Code == http.StatusBadRequest) {
		return fmt.Errorf("%w: kubernetes: %s: %v", sandbox.ErrInvalidSpec, what, err)
	}
	if errors.As(err, &se) && se.Code == http.StatusNotFound {
		// On a create, what is missing is the namespace: the operator's to
		// make.
		_, ns, _ := b.client()
		return fmt.Errorf("%w: kubernetes: %s: %v (is there a namespace %s?)", sandbox.ErrUnavailable, what, err, ns)
	}
	if errors.As(err, &se) && se.Code == http.StatusForbidden && !strings.Contains(se.Message, "cannot ") {
		// Not the role's refusal but an admission's, of what was asked
		// (a RuntimeClass the cluster has not, Pod Security).
		return fmt.Errorf("%w: kubernetes: %s: %v", sandbox.ErrInvalidSpec, what, err)
	}
	if errors.As(err, &se) && (se.Code == http.StatusForbidden || se.Code == http.StatusUnauthorized) {
		return fmt.Errorf("%w: kubernetes: %s: %v (the daemon's role needs pods, secrets and networkpolicies in its namespace: deploy/kubernetes)", sandbox.ErrUnavailable, what, err)
	}
	return fmt.Errorf("%w: kubernetes: %s: %v", sandbox.ErrAgent, what, err)
}

// policy renders p as a network policy, resolving a resolver's rules.
func (b *Backend) policy(ctx context.Context, name string, p egress.Policy) (*networkPolicy, error) {
	rules := p.Rules
	if p.Mode == egress.Dynamic {
		if p.Resolver == nil {
			return nil, fmt.Errorf("%w: egress mode resolver without a resolver", sandbox.ErrInvalidSpec)
		}
		var err error
		if rules, err = p.Resolver(ctx); err != nil {
			return nil, fmt.Errorf("%w: the egress resolver: %v", sandbox.ErrInvalidSpec, err)
		}
	}
	return renderPolicy(name, nil, rules, p.Mode, b.cfg.AgentIngress)
}

// waitingFatal are the reasons a container waits that no wait mends.
var waitingFatal = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true, "ErrImageNeverPull": true,
	"CreateContainerConfigError": true, "CreateContainerError": true, "RunContainerError": true, "CrashLoopBackOff": true,
}

// awaitAddress waits for the pod to run and have an address, and says why
// it never will where the cluster tells.
func (i *instance) awaitAddress(ctx context.Context, rv string) (string, error) {
	api, ns, _ := i.b.client()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var ip string
	var why error
	err := api.watchPod(ctx, ns, i.name, rv, func(p *pod) bool {
		if p == nil {
			why = errors.New("the pod was deleted while it started")
			return true
		}
		why = podProblem(p)
		if why != nil {
			return true
		}
		for _, c := range p.Status.ContainerStatuses {
			if c.Name == agentName && c.State.Running != nil && p.Status.PodIP != "" {
				ip = p.Status.PodIP
				return true
			}
		}
		return false
	})
	if why != nil {
		return "", why
	}
	if err != nil {
		return "", fmt.Errorf("%w: kubernetes: waiting for the pod %s: %v%s", sandbox.ErrAgent, i.name, err, i.events(context.WithoutCancel(ctx)))
	}
	return ip, nil
}

// podProblem is why p will not run, when its status says.
func podProblem(p *pod) error {
	if p.Status.Phase == "Failed" || p.Status.Phase == "Succeeded" {
		msg := p.Status.Message
		for _, c := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
			if t := c.State.Terminated; t != nil && (t.ExitCode != 0 || c.Name == agentName) {
				msg += fmt.Sprintf(" %s exited %d (%s) %s", c.Name, t.ExitCode, t.Reason, strings.TrimSpace(t.Message))
			}
		}
		return fmt.Errorf("%w: kubernetes: the pod %s ended before its agent served:%s", sandbox.ErrAgent, p.Metadata.Name, msg)
	}
	for _, c := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
		if w := c.State.Waiting; w != nil && waitingFatal[w.Reason] {
			err := sandbox.ErrAgent
			if strings.Contains(w.Reason, "Image") {
				err = sandbox.ErrInvalidSpec
			}
			return fmt.Errorf("%w: kubernetes: the pod %s cannot start its %s container: %s: %s", err, p.Metadata.Name, c.Name, w.Reason, w.Message)
		}
	}
	// A pod not yet scheduled is waited on: a cluster that scales up may
	// yet place it (the create's deadline holds).
	return nil
}

// events is the pod's recent events, for an error.
func (i *instance) events(ctx context.Context) string {
	api, ns, _ := i.b.client()
	var evs list[struct {
		Reason  string `json:"reason"`
		Message string `json:"message"`
	}]
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if api.do(ctx, http.MethodGet, nsPath(ns, "events", "")+"?fieldSelector=involvedObject.name%3D"+i.name, nil, &evs) != nil || len(evs.Items) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("; the cluster said:")
	for _, e := range evs.Items[max(0, len(evs.Items)-5):] {
		fmt.Fprintf(&b, " %s: %s;", e.Reason, e.Message)
	}
	return b.String()
}

// instance is one pod.
type instance struct {
	b    *Backend
	name string
	uid  int
	ep   client.Endpoint
	made struct{ policy, secret, claim, pod bool }
	// pod is what is made to run it (again, after a suspension), with
	// the resource version of the one made last; token the agent's.
	pod   *pod
	rv    string
	token string
	// gen counts the pods a suspension ended: a watch of an earlier one
	// does not report the agent's exit.
	gen atomic.Int64

	exited   chan struct{}
	exitOnce sync.Once
	exitCode atomic.Int64

	mu   sync.Mutex
	gone bool
}

// watch closes exited once the pod's agent has ended, or the pod is gone.
func (i *instance) watch(rv string, gen int64) {
	api, ns, _ := i.b.client()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-i.exited
		cancel()
	}()
	code := -1
	for ctx.Err() == nil {
		err := api.watchPod(ctx, ns, i.name, rv, func(p *pod) bool {
			if p == nil {
				return true
			}
			for _, c := range p.Status.ContainerStatuses {
				if t := c.State.Terminated; c.Name == agentName && t != nil {
					code = t.ExitCode
					return true
				}
			}
			return p.Status.Phase == "Failed" || p.Status.Phase == "Succeeded"
		})
		if err == nil || ctx.Err() != nil {
			break
		}
		if isStatus(err, http.StatusNotFound) {
			break
		}
		if i.gen.Load() != gen {
			return
		}
		// The API server went away for a while: watch again from now.
		rv = ""
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	if i.gen.Load() != gen {
		return // suspended: the pod's end is not the agent's exit
	}
	i.exit(code)
}

func (i *instance) exit(code int) {
	i.exitOnce.Do(func() {
		i.exitCode.Store(int64(code))
		close(i.exited)
	})
}

// ExitCode is the agent's exit status as the kubelet reported it, once
// Exited has closed (-1 where it could not say).
func (i *instance) ExitCode() int { return int(i.exitCode.Load()) }

func (i *instance) Endpoint() client.Endpoint {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.ep
}
func (i *instance) Exited() <-chan struct{} { return i.exited }

// Diagnostics is the tail of the agent's log, as the kubelet kept it.
func (i *instance) Diagnostics() string {
	api, ns, err := i.b.client()
	if err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := api.request(ctx, http.MethodGet, nsPath(ns, "pods", i.name)+"/log?container="+agentName+"&tailLines=100&limitBytes=65536", nil, "")
	if err != nil {
		return ""
	}
	resp, err := api.hc.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 65536))
	if resp.StatusCode != http.StatusOK {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// SetEgress rewrites the sandbox's network policy and returns once the
// API server gives back what was written.
func (i *instance) SetEgress(ctx context.Context, p egress.Policy) error {
	api, ns, _ := i.b.client()
	np, err := i.b.policy(ctx, i.name, p)
	if err != nil {
		return err
	}
	var cur networkPolicy
	if err := api.get(ctx, ns, "networkpolicies", i.name, &cur); err != nil {
		return i.b.apiErr("the network policy", err)
	}
	// Everything but the rules stays as it was (labels, owner, selector).
	cur.Spec.Ingress, cur.Spec.Egress, cur.Spec.PolicyTypes = np.Spec.Ingress, np.Spec.Egress, np.Spec.PolicyTypes
	var got networkPolicy
	if err := api.replace(ctx, ns, "networkpolicies", i.name, &cur, &got); err != nil {
		return i.b.apiErr("the network policy", err)
	}
	var back networkPolicy
	if err := api.get(ctx, ns, "networkpolicies", i.name, &back); err != nil {
		return i.b.apiErr("reading the network policy back", err)
	}
	want, _ := json.Marshal(normalPolicy(cur.Spec))
	have, _ := json.Marshal(normalPolicy(back.Spec))
	if string(want) != string(have) {
		return fmt.Errorf("%w: kubernetes: the network policy read back is not the one written", sandbox.ErrAgent)
	}
	return nil
}

// normalPolicy is s as the API server gives it back: no rules is none.
func normalPolicy(s networkPolicySpec) networkPolicySpec {
	if len(s.Ingress) == 0 {
		s.Ingress = nil
	}
	if len(s.Egress) == 0 {
		s.Egress = nil
	}
	return s
}

// state is what a later process needs to take the sandbox back.
type state struct {
	Name string `json:"name"`
	UID  int    `json:"uid"`
	// Claim: the workspace is a claim of the sandbox's own; Pod is then
	// the pod to make again to resume it (the token is in its secret).
	Claim bool `json:"claim,omitempty"`
	Pod   *pod `json:"pod,omitempty"`
}

// State describes the instance for Adopt (no secret).
func (i *instance) State() ([]byte, error) {
	st := state{Name: i.name, UID: i.uid, Claim: i.made.claim}
	if i.made.claim {
		st.Pod = i.pod
	}
	return json.Marshal(st)
}

// Adopt takes back a running pod this backend made.
func (b *Backend) Adopt(ctx context.Context, raw []byte, token string) (sandbox.Instance, error) {
	var st state
	if err := json.Unmarshal(raw, &st); err != nil || !strings.HasPrefix(st.Name, "cordon-") {
		return nil, fmt.Errorf("%w: kubernetes: a state that names no pod", sandbox.ErrAgent)
	}
	api, ns, err := b.client()
	if err != nil {
		return nil, fmt.Errorf("%w: kubernetes: %v", sandbox.ErrUnavailable, err)
	}
	var p pod
	if err := api.get(ctx, ns, "pods", st.Name, &p); err != nil {
		if isStatus(err, http.StatusNotFound) && st.Claim && st.Pod != nil {
			// A suspended sandbox: its claim, secret and policy, no pod.
			if err := api.get(ctx, ns, "persistentvolumeclaims", st.Name, nil); err != nil {
				return nil, fmt.Errorf("%w: kubernetes: the workspace's claim %s: %v", sandbox.ErrAgent, st.Name, err)
			}
			inst := &instance{b: b, name: st.Name, uid: st.UID, exited: make(chan struct{}), token: token, pod: st.Pod}
			inst.exitCode.Store(-1)
			inst.made.policy, inst.made.secret, inst.made.claim = true, true, true
			return inst, nil
		}
		return nil, fmt.Errorf("%w: kubernetes: pod %s: %v", sandbox.ErrAgent, st.Name, err)
	}
	running := p.Status.Phase == "Running" && p.Status.PodIP != "" && p.Metadata.DeletionTimestamp == nil
	if owner := p.Metadata.Labels[LabelOwner]; owner != b.cfg.Owner && !slices.Contains(b.cfg.FormerOwners, owner) || !running {
		return nil, fmt.Errorf("%w: kubernetes: pod %s is not a running sandbox of this backend", sandbox.ErrAgent, st.Name)
	}
	inst := &instance{b: b, name: st.Name, uid: st.UID, exited: make(chan struct{}), token: token}
	inst.exitCode.Store(-1)
	inst.made.policy, inst.made.secret, inst.made.pod, inst.made.claim = true, true, true, st.Claim
	// The pod as it was made, to make again after a suspension.
	inst.pod = st.Pod
	inst.ep = client.Endpoint{Network: "tcp", Address: net.JoinHostPort(p.Status.PodIP, strconv.Itoa(AgentPort)), Token: token}
	go inst.watch(p.Metadata.ResourceVersion, inst.gen.Load())
	return inst, nil
}

// Sweep removes, with confirmation, every pod of this backend's owner that
// keep does not hold, and the policies and secrets no pod holds.
func (b *Backend) Sweep(ctx context.Context, keep []sandbox.Instance) error {
	api, ns, err := b.client()
	if err != nil {
		return fmt.Errorf("%w: kubernetes: %v", sandbox.ErrUnavailable, err)
	}
	held := map[string]bool{}
	for _, k := range keep {
		if i, ok := k.(*instance); ok {
			held[i.name] = true
		}
	}
	sel := LabelTier + "=" + Name + "," + LabelOwner + "=" + b.cfg.Owner
	var errs []error
	names := map[string]bool{}
	for _, kind := range []string{"pods", "secrets", "networkpolicies", "persistentvolumeclaims"} {
		var l list[struct {
			Metadata meta `json:"metadata"`
		}]
		if err := api.list(ctx, ns, kind, sel, &l); err != nil {
			return fmt.Errorf("%w: kubernetes: listing %s: %v", sandbox.ErrTeardown, kind, err)
		}
		for _, o := range l.Items {
			if n := o.Metadata.Labels[LabelSandbox]; n != "" && !held[n] {
				names[n] = true
			}
		}
	}
	for n := range names {
		i := &instance{b: b, name: n, exited: make(chan struct{})}
		i.made.policy, i.made.secret, i.made.pod, i.made.claim = true, true, true, true
		errs = append(errs, i.Destroy(ctx))
	}
	return errors.Join(errs...)
}

// sweepEnded deletes, once per process, the pods of this backend's owner
// that have ended (their maker died without deleting them, and their
// agent idled out), with their secrets and policies. A failure is left
// for the next process.
func (b *Backend) sweepEnded(ctx context.Context) {
	api, ns, err := b.client()
	if err != nil {
		return
	}
	var l list[pod]
	if api.list(ctx, ns, "pods", LabelTier+"="+Name+","+LabelOwner+"="+b.cfg.Owner, &l) != nil {
		return
	}
	for _, p := range l.Items {
		if p.Status.Phase == "Succeeded" || p.Status.Phase == "Failed" {
			i := &instance{b: b, name: p.Metadata.Name, exited: make(chan struct{})}
			i.made.policy, i.made.secret, i.made.pod, i.made.claim = true, true, true, true
			_ = i.Destroy(ctx)
		}
	}
}

// Destroy deletes the pod (the kubelet stops what runs in it) and
// confirms the API server no longer has it, then deletes its policy and
// secret (which the cluster would collect with it). A deletion that fails
// is an error wrapping ErrTeardown, and Destroy may be retried.
func (i *instance) Destroy(ctx context.Context) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.gone {
		return nil
	}
	api, ns, err := i.b.client()
	if err != nil {
		return fmt.Errorf("%w: kubernetes: %v", sandbox.ErrTeardown, err)
	}
	if i.made.pod {
		if err := api.remove(ctx, ns, "pods", i.name, 1); err != nil {
			return fmt.Errorf("%w: kubernetes: delete pod %s: %v", sandbox.ErrTeardown, i.name, err)
		}
		if err := i.awaitGone(ctx, "pods"); err != nil {
			return err
		}
		i.made.pod = false
	}
	i.exit(-1)
	// A persistent workspace goes only once its pod is confirmed gone
	// (above): a pod still running might yet write to it.
	if i.made.claim {
		if err := api.remove(ctx, ns, "persistentvolumeclaims", i.name, -1); err != nil {
			return fmt.Errorf("%w: kubernetes: delete claim %s: %v", sandbox.ErrTeardown, i.name, err)
		}
		if err := i.awaitGone(ctx, "persistentvolumeclaims"); err != nil {
			return err
		}
		i.made.claim = false
	}
	for _, o := range []struct {
		kind string
		made bool
	}{{"networkpolicies", i.made.policy}, {"secrets", i.made.secret}} {
		if !o.made {
			continue
		}
		if err := api.remove(ctx, ns, o.kind, i.name, -1); err != nil {
			return fmt.Errorf("%w: kubernetes: delete %s %s: %v", sandbox.ErrTeardown, o.kind, i.name, err)
		}
	}
	i.gone = true
	return nil
}

// awaitGone waits until the API server no longer has the object of kind:
// for a pod, the kubelet has stopped its containers (it removes the pod
// once they have); for a claim, no pod uses it.
func (i *instance) awaitGone(ctx context.Context, kind string) error {
	api, ns, _ := i.b.client()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for wait := 5 * time.Millisecond; ; wait = min(wait*2, 200*time.Millisecond) {
		err := api.get(ctx, ns, kind, i.name, nil)
		if isStatus(err, http.StatusNotFound) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: kubernetes: %s %s is still there after its deletion: %v", sandbox.ErrTeardown, kind, i.name, ctx.Err())
		case <-time.After(wait):
		}
	}
}
