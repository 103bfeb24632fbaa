package egress

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cordon-sandbox/cordon/internal/printable"
	"github.com/cordon-sandbox/cordon/metrics"
)

// LookupNetIP resolves names for the proxy; net.DefaultResolver is one.
type LookupNetIP interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Config configures a Proxy. The zero value is usable.
type Config struct {
	// Resolver resolves names; nil means the host's resolver.
	Resolver LookupNetIP
	// NetNS, when set, is a network namespace file (/run/netns/NAME) that
	// every upstream connection is made from.
	NetNS string
	// Audit receives one JSON line per decision; nil discards.
	Audit io.Writer
	// AuditRate bounds the lines one sandbox writes to Audit, per second
	// (default 20) after a burst of AuditBurst (default 100): a workload
	// that makes connections as fast as it can must not fill the host's
	// log. Decisions past it are counted in the metrics as always, and
	// the next line written says how many lines were left out.
	AuditRate  float64
	AuditBurst int
	// OnRecord, when set, is also given each decision the audit log
	// would take (within the same rate), as it is made: a front end shows
	// refusals as they happen (cordon run prints them, the daemon adds
	// them to the sandbox's events). It must not block.
	OnRecord func(Record)
	// Registry receives the proxy's metrics; nil registers none.
	Registry *metrics.Registry
	// MaxConns bounds a sandbox's simultaneous connections (default 256).
	MaxConns int
	// MaxHeaderBytes bounds a request head (default 64 KiB).
	MaxHeaderBytes int
	// HeaderTimeout bounds reading a request head (default 30 s).
	HeaderTimeout time.Duration
	// IdleTimeout closes a connection idle in both directions (default 5 min).
	IdleTimeout time.Duration
	// MaxLifetime bounds any one connection (default 1 h).
	MaxLifetime time.Duration
	// DialTimeout bounds an upstream connect (default 10 s).
	DialTimeout time.Duration
}

// Proxy is the host-side egress proxy shared by a host's sandboxes.
type Proxy struct {
	cfg      Config
	auditMu  sync.Mutex
	audit    *json.Encoder
	decided  *metrics.CounterVec
	bytes    *metrics.CounterVec
	attached atomic.Int64
}

// New returns a proxy.
func New(cfg Config) *Proxy {
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 256
	}
	if cfg.MaxHeaderBytes <= 0 {
		cfg.MaxHeaderBytes = 64 << 10
	}
	if cfg.HeaderTimeout <= 0 {
		cfg.HeaderTimeout = 30 * time.Second
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 5 * time.Minute
	}
	if cfg.MaxLifetime <= 0 {
		cfg.MaxLifetime = time.Hour
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	if cfg.AuditRate <= 0 {
		cfg.AuditRate = 20
	}
	if cfg.AuditBurst <= 0 {
		cfg.AuditBurst = 100
	}
	p := &Proxy{cfg: cfg}
	if cfg.Audit != nil {
		p.audit = json.NewEncoder(cfg.Audit)
	}
	p.decided = metrics.NewCounterVec("cordon_egress_decisions_total", "Egress decisions, by outcome.", "decision")
	p.bytes = metrics.NewCounterVec("cordon_egress_bytes_total", "Bytes carried through the egress proxy, by direction.", "direction")
	// Every series exists from the start, at zero, so a dashboard shows
	// "no decisions yet" rather than nothing.
	for _, d := range []string{"allowed", "refused", "closed"} {
		p.decided.With(d)
	}
	for _, d := range []string{"up", "down"} {
		p.bytes.With(d)
	}
	attached := metrics.NewGaugeFunc("cordon_egress_sandboxes", "Sandboxes attached to the egress proxy.", nil, func(set func(float64, ...string)) {
		set(float64(p.attached.Load()))
	})
	if cfg.Registry != nil {
		cfg.Registry.MustRegister(p.decided, p.bytes, attached)
	}
	return p
}

// Record is one audit line.
type Record struct {
	Time       time.Time `json:"time"`
	Sandbox    string    `json:"sandbox"`
	Method     string    `json:"method"`
	Host       string    `json:"host"`
	Port       int       `json:"port"`
	Addr       string    `json:"addr,omitempty"`
	Decision   string    `json:"decision"` // allowed, refused, closed
	Rule       string    `json:"rule,omitempty"`
	Reason     string    `json:"reason,omitempty"`
	BytesUp    int64     `json:"bytesUp"`
	BytesDown  int64     `json:"bytesDown"`
	DurationMs int64     `json:"durationMs"`
	// Suppressed counts this sandbox's decisions left out of the log
	// (Config.AuditRate) since its previous line; the last line of a
	// sandbox that had some left out, decision "suppressed", carries only
	// this count.
	Suppressed int64 `json:"suppressed,omitempty"`
	// Unlisted marks a refusal for want of a rule: a rule naming the host
	// and port would allow it (a name that does not resolve, or resolves
	// to a screened address, needs something else).
	Unlisted bool `json:"unlisted,omitempty"`
}

// Message is a refusal's one-line account: the host, port and reason, and
// for an Unlisted one the flag that would allow it.
func (r Record) Message() string {
	msg := fmt.Sprintf("egress refused %s:%d: %s", r.Host, r.Port, r.Reason)
	if r.Unlisted {
		msg += fmt.Sprintf("; allow it with --allow %s:%d", r.Host, r.Port)
	}
	return msg
}

// record counts r in the metrics and writes it to the audit log, as the
// sandbox's share of the log allows.
func (b *Binding) record(r Record) {
	// What the sandbox named is the sandbox's choice: it reaches a
	// terminal only escaped (cordon run's stderr, cordon events).
	r.Host, r.Reason = printable.String(r.Host), printable.String(r.Reason)
	p := b.p
	p.decided.With(r.Decision).Inc()
	p.bytes.With("up").Add(float64(r.BytesUp))
	p.bytes.With("down").Add(float64(r.BytesDown))
	if p.audit == nil && p.cfg.OnRecord == nil {
		return
	}
	b.auditMu.Lock()
	now := time.Now()
	b.tokens = min(float64(p.cfg.AuditBurst), b.tokens+now.Sub(b.refilled).Seconds()*p.cfg.AuditRate)
	b.refilled = now
	if b.tokens < 1 {
		b.suppressed++
		b.auditMu.Unlock()
		return
	}
	b.tokens--
	r.Suppressed, b.suppressed = b.suppressed, 0
	b.auditMu.Unlock()
	p.write(r)
}

func (p *Proxy) write(r Record) {
	if p.audit != nil {
		p.auditMu.Lock()
		_ = p.audit.Encode(r)
		p.auditMu.Unlock()
	}
	if p.cfg.OnRecord != nil {
		p.cfg.OnRecord(r)
	}
}

// Binding is one sandbox's attachment to the proxy.
type Binding struct {
	p       *Proxy
	sandbox string
	ln      net.Listener
	policy  atomic.Pointer[matcher]
	sem     chan struct{}
	mu      sync.Mutex
	tunnels map[*tunnel]struct{}
	clients map[net.Conn]struct{} // every connection from the sandbox being served
	wg      sync.WaitGroup
	closed  atomic.Bool
	serving atomic.Int32 // connections being served
	last    atomic.Int64 // unix nanoseconds of the last connection's end

	auditMu    sync.Mutex
	tokens     float64   // audit lines the sandbox may write now
	refilled   time.Time // when tokens was last brought up to date
	suppressed int64     // decisions left out of the log since its last line
}

// Activity reports how many of the sandbox's connections are open and when
// the last one ended (zero if none has): egress traffic is activity inside
// the sandbox, which an idle timeout must count.
func (b *Binding) Activity() (open int, lastEnded time.Time) {
	if n := b.last.Load(); n != 0 {
		lastEnded = time.Unix(0, n)
	}
	return int(b.serving.Load()), lastEnded
}

type tunnel struct {
	host   string
	port   int
	addr   netip.Addr
	client net.Conn
	up     net.Conn
}

func (t *tunnel) close() {
	t.client.Close()
	if t.up != nil {
		t.up.Close()
	}
}

// Attach serves sandbox's egress on ln (each sandbox has its own listener,
// so the listener names the sandbox and no credential is needed) under
// policy, until Close.
func (p *Proxy) Attach(ctx context.Context, sandbox string, ln net.Listener, policy Policy) (*Binding, error) {
	m, err := compilePolicy(ctx, policy)
	if err != nil {
		return nil, err
	}
	b := &Binding{p: p, sandbox: sandbox, ln: ln, sem: make(chan struct{}, p.cfg.MaxConns), tunnels: map[*tunnel]struct{}{}, clients: map[net.Conn]struct{}{},
		tokens: float64(p.cfg.AuditBurst), refilled: time.Now()}
	b.policy.Store(m)
	p.attached.Add(1)
	b.wg.Add(1)
	go b.serve()
	return b, nil
}

// SetPolicy changes the policy for new connections at once and closes open
// tunnels the new policy no longer allows.
func (b *Binding) SetPolicy(ctx context.Context, policy Policy) error {
	m, err := compilePolicy(ctx, policy)
	if err != nil {
		return err
	}
	b.policy.Store(m)
	b.mu.Lock()
	var doomed []*tunnel
	for t := range b.tunnels {
		if _, ok := m.hostAllowed(t.host, t.port); !ok {
			doomed = append(doomed, t)
		} else if _, ok := m.addrAllowed(t.addr, t.port); !ok {
			doomed = append(doomed, t)
		}
	}
	b.mu.Unlock()
	for _, t := range doomed {
		t.close()
		b.record(Record{Time: time.Now(), Sandbox: b.sandbox, Method: "CONNECT", Host: t.host, Port: t.port, Addr: t.addr.String(), Decision: "closed", Reason: "no longer allowed by the sandbox's egress policy"})
	}
	return nil
}

// Close stops serving and closes every open connection.
func (b *Binding) Close() error {
	if b.closed.Swap(true) {
		return nil
	}
	err := b.ln.Close()
	b.mu.Lock()
	for t := range b.tunnels {
		t.close()
	}
	// Connections still in their request head end too: the sandbox's
	// teardown does not wait out the head's time.
	for c := range b.clients {
		c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
	b.p.attached.Add(-1)
	b.auditMu.Lock()
	left := b.suppressed
	b.auditMu.Unlock()
	if left > 0 && b.p.audit != nil {
		b.p.write(Record{Time: time.Now(), Sandbox: b.sandbox, Decision: "suppressed", Suppressed: left})
	}
	return err
}

func (b *Binding) serve() {
	defer b.wg.Done()
	for {
		c, err := b.ln.Accept()
		if err != nil {
			if b.closed.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(5 * time.Millisecond)
			continue
		}
		select {
		case b.sem <- struct{}{}:
		default:
			go refuseBusy(c, b.p.cfg.MaxConns)
			continue
		}
		b.wg.Add(1)
		b.serving.Add(1)
		go func() {
			defer b.wg.Done()
			defer func() {
				b.last.Store(time.Now().UnixNano())
				b.serving.Add(-1)
				<-b.sem
			}()
			b.handle(c)
		}()
	}
}

func refuseBusy(c net.Conn, n int) {
	_ = c.SetDeadline(time.Now().Add(time.Second))
	fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\ncordon egress: this sandbox already has %d connections open\n", n)
	c.Close()
}

// refusal is a decision not to connect, answered with 403 and the reason;
// unlisted when only a rule is missing (Record.Unlisted).
type refusal struct {
	reason   string
	unlisted bool
}

func (r *refusal) Error() string { return r.reason }

// hold counts c among the connections Close ends, unless the binding is
// closed already (then c is closed); release takes it out.
func (b *Binding) hold(c net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Load() {
		c.Close()
		return false
	}
	b.clients[c] = struct{}{}
	return true
}

func (b *Binding) release(c net.Conn) {
	b.mu.Lock()
	delete(b.clients, c)
	b.mu.Unlock()
	c.Close()
}

func (b *Binding) handle(c net.Conn) {
	if !b.hold(c) {
		return
	}
	start := time.Now()
	deadline := start.Add(b.p.cfg.HeaderTimeout)
	conn, first, err := receivePass(c, deadline)
	if conn != c {
		b.release(c)
		if !b.hold(conn) {
			return
		}
	}
	c = conn
	defer b.release(c)
	if err != nil {
		var r *refusal
		switch {
		case errors.As(err, &r):
			writeStatus(c, http.StatusBadRequest, "cordon egress: "+r.reason)
		case !errors.Is(err, io.EOF):
			writeStatus(c, http.StatusBadRequest, "cordon egress: malformed or oversized request")
		}
		return
	}
	_ = c.SetReadDeadline(deadline)
	var r io.Reader = c
	if len(first) > 0 {
		r = io.MultiReader(bytes.NewReader(first), c)
	}
	lr := &io.LimitedReader{R: r, N: int64(b.p.cfg.MaxHeaderBytes)}
	br := bufio.NewReaderSize(lr, 16<<10)
	head, hosts, err := readHead(br)
	var req *http.Request
	if err == nil {
		req, err = http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
	}
	if err == nil && len(hosts) > 1 {
		err = errors.New("more than one Host header")
	}
	if err != nil {
		status := http.StatusBadRequest
		if lr.N <= 0 {
			status = http.StatusRequestHeaderFieldsTooLarge
		}
		writeStatus(c, status, "cordon egress: malformed or oversized request")
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	lr.N = 1 << 62 // the head was bounded; bodies and tunnels are not headers
	if req.Method == http.MethodConnect {
		b.connect(c, br, req, start)
		return
	}
	hostHeader := ""
	if len(hosts) == 1 {
		hostHeader = hosts[0]
	}
	b.forward(c, br, req, hostHeader, start)
}

// readHead reads a request head (through the blank line) and the values
// of its Host headers: net/http drops the Host header of an absolute-form
// request, and the proxy must compare it with the URL.
func readHead(br *bufio.Reader) ([]byte, []string, error) {
	var head []byte
	var hosts []string
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return nil, nil, err
		}
		head = append(head, line...)
		t := strings.TrimRight(string(line), "\r\n")
		if t == "" {
			return head, hosts, nil
		}
		if k, v, ok := strings.Cut(t, ":"); ok && strings.EqualFold(strings.TrimSpace(k), "host") {
			hosts = append(hosts, strings.TrimSpace(v))
		}
	}
}

func writeStatus(c net.Conn, status int, msg string) {
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s\n",
		status, http.StatusText(status), len(msg)+1, msg)
}

func (b *Binding) refuse(c net.Conn, rec Record, r *refusal) {
	rec.Decision, rec.Reason, rec.Unlisted, rec.DurationMs = "refused", r.reason, r.unlisted, time.Since(rec.Time).Milliseconds()
	b.record(rec)
	msg := fmt.Sprintf("cordon egress refused %s:%d: %s.", rec.Host, rec.Port, r.reason)
	if r.unlisted {
		msg += fmt.Sprintf(" The sandbox's egress policy must allow it (for example: cordon run --allow %s:%d).", rec.Host, rec.Port)
	}
	writeStatus(c, http.StatusForbidden, msg)
}

// dial decides host:port under the current policy, resolves, screens every
// address, and connects to an address it screened (screened again, as a
// socket address, just before connect).
func (b *Binding) dial(ctx context.Context, host string, port int) (net.Conn, netip.Addr, string, error) {
	m := b.policy.Load()
	rule, ok := m.hostAllowed(host, port)
	if !ok {
		if _, lit := literalIP(host); lit {
			return nil, netip.Addr{}, "", &refusal{"no rule names this address and port", true}
		}
		if m.mode == DenyAll {
			return nil, netip.Addr{}, "", &refusal{"the sandbox's egress policy is deny-all", true}
		}
		return nil, netip.Addr{}, "", &refusal{"no rule allows this host and port", true}
	}
	var addrs []netip.Addr
	if ip, lit := literalIP(host); lit {
		addrs = []netip.Addr{ip}
	} else {
		rctx, cancel := context.WithTimeout(ctx, b.p.cfg.DialTimeout)
		got, err := b.p.cfg.Resolver.LookupNetIP(rctx, "ip", host)
		cancel()
		if err != nil || len(got) == 0 {
			return nil, netip.Addr{}, rule, &refusal{reason: "the name does not resolve"}
		}
		// Go's resolver answers a hosts file's IPv4 entries in their
		// IPv4-mapped form: what the proxy resolved itself is judged as
		// the address it is (a mapped address the workload wrote stays
		// refused).
		for i := range got {
			got[i] = got[i].Unmap()
		}
		addrs = got
	}
	var why string
	for _, ip := range addrs {
		if r, ok := m.addrAllowed(ip, port); !ok {
			why = r
			continue
		} else if r != "" {
			rule = r
		}
		conn, err := b.p.connect(ctx, ip, port, func(a netip.Addr) bool {
			_, ok := b.policy.Load().addrAllowed(a, port)
			return ok
		})
		if err != nil {
			why = "connect: " + err.Error()
			continue
		}
		return conn, ip, rule, nil
	}
	return nil, netip.Addr{}, rule, &refusal{reason: why}
}

// connect dials ip:port exactly; control re-checks the socket address the
// kernel is about to use.
func (p *Proxy) connect(ctx context.Context, ip netip.Addr, port int, allowed func(netip.Addr) bool) (net.Conn, error) {
	d := &net.Dialer{Timeout: p.cfg.DialTimeout, Control: func(network, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil || !allowed(ap.Addr()) {
			return fmt.Errorf("address %s refused at connect", address)
		}
		return nil
	}}
	target := netip.AddrPortFrom(ip, uint16(port)).String()
	if p.cfg.NetNS != "" {
		return dialInNetNS(ctx, p.cfg.NetNS, d, target)
	}
	return d.DialContext(ctx, "tcp", target)
}

func splitHostPort(hostport string, defaultPort int) (string, int, error) {
	host, portText, err := net.SplitHostPort(hostport)
	if err != nil {
		if defaultPort == 0 {
			return "", 0, err
		}
		host, portText = strings.Trim(hostport, "[]"), strconv.Itoa(defaultPort)
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("bad port %q", portText)
	}
	if _, lit := literalIP(host); !lit {
		if host, err = NormalizeHost(host); err != nil {
			return "", 0, err
		}
	}
	return host, port, nil
}
