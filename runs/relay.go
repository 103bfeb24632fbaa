package runs

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/cordon-sandbox/cordon/egress"
)

const (
	// brokerCallTimeout bounds one binding call's round trip.
	brokerCallTimeout = 10 * time.Second
	// maxRedirects bounds the hops of a brokered fetch.
	maxRedirects = 5
	// BindingsTokenHeader carries the run's token to the broker, and only
	// to the broker.
	BindingsTokenHeader = "x-questpie-sandbox-token"
	nativeResultCap     = 768 << 10
	envelopeHeadroom    = 4 << 10
	httpWireCap         = (BrokerHTTPBodyCap+2)/3*4 + 128<<10
	nativeRequestCap    = 64 << 10
)

// relay answers a guest's binding calls: http.fetch the host makes itself,
// everything else goes to the broker with the run's token.
type relay struct {
	ctx      context.Context
	cancel   context.CancelFunc
	rn       *Runner
	sandbox  string
	p        *plan
	netRules []egress.Rule
	out      *outputs

	wmu sync.Mutex
	w   *io.PipeWriter

	slots chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	calls int
	fail  string
	fetch *http.Client
}

func newRelay(ctx context.Context, rn *Runner, sandbox string, p *plan, netRules []egress.Rule, w *io.PipeWriter, out *outputs) *relay {
	ctx, cancel := context.WithCancel(ctx)
	return &relay{ctx: ctx, cancel: cancel, rn: rn, sandbox: sandbox, p: p, netRules: netRules, w: w, out: out, slots: make(chan struct{}, MaxInflightRPCs)}
}

type rpcCall struct {
	Type   string          `json:"type"`
	ID     *int64          `json:"id"`
	Method string          `json:"method"`
	Args   json.RawMessage `json:"args"`
}

type rpcError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// handle takes one frame the guest wrote; false ends the run (over a cap).
func (r *relay) handle(line []byte) bool {
	var c rpcCall
	if json.Unmarshal(line, &c) != nil || c.Type != "rpc" || c.ID == nil || c.Method == "" {
		return true // not a call: ignored, as stray output is
	}
	limit := nativeRequestCap
	if c.Method == "http.fetch" {
		limit = httpWireCap
	}
	r.mu.Lock()
	r.calls++
	calls := r.calls
	r.mu.Unlock()
	if len(line) > limit || calls > MaxRPCCount {
		return false
	}
	// At most MaxInflightRPCs at once: the guest's next frames wait.
	select {
	case r.slots <- struct{}{}:
	case <-r.ctx.Done():
		return true
	}
	r.wg.Add(1)
	go func() {
		defer func() { <-r.slots; r.wg.Done() }()
		var value any
		var err *rpcError
		if c.Method == "http.fetch" {
			value, err = r.httpFetch(c.Args)
		} else {
			value, err = r.broker(c.Method, c.Args)
			if err != nil {
				// A refused or failed broker call ends the run, so that
				// nothing the guest does next acts on a partial outcome.
				r.failWith(err.Message)
				return
			}
		}
		r.answer(*c.ID, value, err)
	}()
	return true
}

func (r *relay) answer(id int64, value any, e *rpcError) {
	msg := map[string]any{"type": "rpc-result", "id": id, "ok": e == nil}
	if e != nil {
		msg["error"] = e
	} else {
		msg["value"] = value
	}
	b, err := json.Marshal(msg)
	if err != nil {
		b, _ = json.Marshal(map[string]any{"type": "rpc-result", "id": id, "ok": false, "error": rpcError{"execution_error", "the answer is not JSON"}})
	}
	r.wmu.Lock()
	defer r.wmu.Unlock()
	_, _ = r.w.Write(append(append([]byte(frameMarker), b...), '\n'))
}

func (r *relay) failWith(msg string) {
	r.mu.Lock()
	if r.fail == "" {
		r.fail = msg
	}
	r.mu.Unlock()
	r.out.stop()
}

func (r *relay) failure() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fail
}

// close abandons the calls still out and waits for them.
func (r *relay) close() {
	r.cancel()
	r.w.Close()
	r.wg.Wait()
}

// fetchArgs is http.fetch's argument: the request, its body in base64.
type fetchArgs struct {
	URL     string            `json:"url"`
	Method  string            `json:"method"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
}

// httpFetch makes the guest's request from the host, under exactly the
// run's net hosts: each hop (redirects are followed here, at most
// maxRedirects) is decided, resolved, screened and pinned by the egress
// proxy's dialer, and bodies are capped both ways.
func (r *relay) httpFetch(raw json.RawMessage) (any, *rpcError) {
	bad := func(format string, a ...any) *rpcError {
		return &rpcError{"bad_args", "http.fetch: " + fmt.Sprintf(format, a...)}
	}
	var a fetchArgs
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, bad("arguments are not {url, method, headers, body}")
	}
	if !strings.HasPrefix(a.URL, "http://") && !strings.HasPrefix(a.URL, "https://") {
		return nil, bad("only http and https URLs")
	}
	if len(r.netRules) == 0 {
		return nil, &rpcError{"forbidden", "http.fetch: the run's capabilities allow no net hosts"}
	}
	body, err := base64.StdEncoding.DecodeString(a.Body)
	if err != nil {
		return nil, bad("the body is not base64")
	}
	if len(body) > BrokerHTTPBodyCap {
		return nil, bad("the request body exceeds %d bytes", BrokerHTTPBodyCap)
	}
	c, err := r.fetchClient()
	if err != nil {
		return nil, &rpcError{"execution_error", "http.fetch: " + err.Error()}
	}
	ctx, cancel := context.WithTimeout(r.ctx, brokerCallTimeout)
	defer cancel()
	method := strings.ToUpper(a.Method)
	if method == "" {
		method = http.MethodGet
	}
	req, err := http.NewRequestWithContext(ctx, method, a.URL, bytes.NewReader(body))
	if err != nil {
		return nil, bad("%v", err)
	}
	for k, v := range a.Headers {
		switch strings.ToLower(k) {
		case "host", "connection", "proxy-authorization", "proxy-connection", "transfer-encoding", "upgrade", "te", "keep-alive", "content-length":
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, &rpcError{"forbidden", "http.fetch: " + errText(err)}
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(io.LimitReader(resp.Body, BrokerHTTPBodyCap+1))
	if err != nil {
		return nil, &rpcError{"execution_error", "http.fetch: reading the response: " + errText(err)}
	}
	if len(got) > BrokerHTTPBodyCap {
		return nil, &rpcError{"execution_error", fmt.Sprintf("http.fetch: the response body exceeds %d bytes", BrokerHTTPBodyCap)}
	}
	headers := map[string]string{}
	for k, v := range resp.Header {
		headers[strings.ToLower(k)] = strings.Join(v, ", ")
	}
	return map[string]any{"status": resp.StatusCode, "headers": headers, "body": base64.StdEncoding.EncodeToString(got), "url": resp.Request.URL.String()}, nil
}

func errText(err error) string {
	var ue interface{ Unwrap() error }
	for errors.As(err, &ue) {
		inner := ue.Unwrap()
		if inner == nil {
			break
		}
		if _, ok := inner.(interface{ Unwrap() error }); !ok {
			return inner.Error()
		}
		err = inner
	}
	return err.Error()
}

func (r *relay) fetchClient() (*http.Client, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fetch != nil {
		return r.fetch, nil
	}
	dial, err := r.rn.cfg.Egress.Dialer(r.ctx, "run:"+r.sandbox, egress.Policy{Mode: egress.Static, Rules: r.netRules})
	if err != nil {
		return nil, err
	}
	r.fetch = &http.Client{
		Transport: &http.Transport{DialContext: dial, Proxy: nil, DisableCompression: true, TLSHandshakeTimeout: brokerCallTimeout,
			ResponseHeaderTimeout: brokerCallTimeout, MaxResponseHeaderBytes: 64 << 10},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= maxRedirects {
				return fmt.Errorf("more than %d redirects", maxRedirects)
			}
			return nil
		},
	}
	return r.fetch, nil
}

// brokerMessages are the only failure texts a guest sees from the broker:
// its own diagnostics stay with the host.
var brokerMessages = map[string]string{
	"bad_method":      "invalid sandbox binding method",
	"bad_args":        "invalid sandbox binding arguments",
	"unauthorized":    "sandbox binding authorization failed",
	"forbidden":       "sandbox binding operation forbidden",
	"not_implemented": "sandbox binding operation unavailable",
	"execution_error": "sandbox binding operation failed",
}

var brokerClient = &http.Client{
	Transport: &http.Transport{Proxy: nil, DisableCompression: true, MaxResponseHeaderBytes: 64 << 10},
	// The token goes to the configured URL and nowhere else.
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// broker relays one call to the configured broker with the run's token.
func (r *relay) broker(method string, args json.RawMessage) (any, *rpcError) {
	failed := &rpcError{"execution_error", "sandbox broker request failed"}
	invalid := &rpcError{"execution_error", "sandbox broker returned an invalid response"}
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	body, _ := json.Marshal(map[string]any{"method": method, "args": args})
	ctx, cancel := context.WithTimeout(r.ctx, brokerCallTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.rn.cfg.BrokerURL, bytes.NewReader(body))
	if err != nil {
		return nil, failed
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(BindingsTokenHeader, r.p.Bindings.Token)
	resp, err := brokerClient.Do(req)
	if err != nil {
		return nil, failed
	}
	defer resp.Body.Close()
	limit := nativeResultCap + envelopeHeadroom
	got, err := io.ReadAll(io.LimitReader(resp.Body, int64(limit)+1))
	if err != nil || len(got) > limit {
		return nil, invalid
	}
	var answer struct {
		OK    *bool           `json:"ok"`
		Value json.RawMessage `json:"value"`
		Error *struct {
			Code          string  `json:"code"`
			Message       string  `json:"message"`
			CorrelationID *string `json:"correlationId"`
		} `json:"error"`
	}
	if json.Unmarshal(got, &answer) != nil || answer.OK == nil {
		return nil, invalid
	}
	if *answer.OK && resp.StatusCode == http.StatusOK && answer.Error == nil {
		return answer.Value, nil
	}
	if !*answer.OK && answer.Error != nil {
		code := answer.Error.Code
		if _, ok := brokerMessages[code]; !ok {
			code = "execution_error"
		}
		if id := answer.Error.CorrelationID; id != nil && !identity(*id) {
			return nil, invalid
		}
		return nil, &rpcError{code, brokerMessages[code]}
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &rpcError{"execution_error", brokerMessages["execution_error"]}
	}
	return nil, invalid
}

// netResolver is the host's resolver, answering addresses as they are
// (IPv4 from a hosts file arrives IPv4-mapped from Go's resolver).
type netResolver struct{}

func (netResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	got, err := net.DefaultResolver.LookupNetIP(ctx, network, host)
	for i := range got {
		got[i] = got[i].Unmap()
	}
	return got, err
}
