package kubernetes

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
	"net/url"
	"os"
	"strings"
	"time"
)

// api is the few calls of the Kubernetes API this tier makes, by hand (as
// the docker tier's engine client is): pods, secrets and network policies
// in one namespace. client-go would bring some forty modules and their
// start-up registration into every cordon binary for six resources.
type api struct {
	c  *cluster
	hc *http.Client
	// watch is hc without its timeout, for streams that last.
	watch *http.Client
}

func newAPI(c *cluster) *api {
	tr := &http.Transport{
		TLSClientConfig:     c.tls,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 32,
		IdleConnTimeout:     90 * time.Second,
		ForceAttemptHTTP2:   true,
	}
	return &api{c: c, hc: &http.Client{Transport: tr, Timeout: 30 * time.Second}, watch: &http.Client{Transport: tr}}
}

func (a *api) close() { a.hc.CloseIdleConnections() }

// statusError is an answer that is not a success: the API's Status.
type statusError struct {
	Code    int    `json:"code"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

func (e *statusError) Error() string {
	if e.Message != "" {
		return e.Message
	}
	return fmt.Sprintf("the API server answered %d %s", e.Code, e.Reason)
}

// isStatus reports whether err is the API's answer code.
func isStatus(err error, code int) bool {
	var se *statusError
	return errors.As(err, &se) && se.Code == code
}

func (a *api) request(ctx context.Context, method, path string, body any, contentType string) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.c.server+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", contentType)
	}
	tok := a.c.token
	if a.c.tokenFile != "" {
		b, err := os.ReadFile(a.c.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("the API token: %w", err)
		}
		tok = strings.TrimSpace(string(b))
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	return req, nil
}

// do makes a call and decodes its answer into out (when not nil).
func (a *api) do(ctx context.Context, method, path string, body, out any) error {
	ct := "application/json"
	if method == http.MethodPatch {
		ct = "application/merge-patch+json"
	}
	req, err := a.request(ctx, method, path, body, ct)
	if err != nil {
		return err
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		se := &statusError{}
		if json.Unmarshal(b, se) != nil || se.Code == 0 {
			se = &statusError{Code: resp.StatusCode, Reason: resp.Status, Message: strings.TrimSpace(string(b))}
		}
		se.Code = resp.StatusCode
		return se
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// ready asks the API server whether it serves.
func (a *api) ready(ctx context.Context) error {
	return a.do(ctx, http.MethodGet, "/readyz", nil, nil)
}

func nsPath(ns, kind, name string) string {
	p := "/api/v1/namespaces/" + url.PathEscape(ns) + "/" + kind
	// (persistentvolumeclaims, pods, secrets and events are core.)
	if kind == "networkpolicies" {
		p = "/apis/networking.k8s.io/v1/namespaces/" + url.PathEscape(ns) + "/" + kind
	}
	if name != "" {
		p += "/" + url.PathEscape(name)
	}
	return p
}

func (a *api) create(ctx context.Context, ns, kind string, obj, out any) error {
	return a.do(ctx, http.MethodPost, nsPath(ns, kind, ""), obj, out)
}

func (a *api) get(ctx context.Context, ns, kind, name string, out any) error {
	return a.do(ctx, http.MethodGet, nsPath(ns, kind, name), nil, out)
}

func (a *api) patch(ctx context.Context, ns, kind, name string, patch, out any) error {
	return a.do(ctx, http.MethodPatch, nsPath(ns, kind, name), patch, out)
}

func (a *api) replace(ctx context.Context, ns, kind, name string, obj, out any) error {
	return a.do(ctx, http.MethodPut, nsPath(ns, kind, name), obj, out)
}

// remove deletes an object; one already gone is no error. grace, when not
// negative, is the pod's termination grace in seconds.
func (a *api) remove(ctx context.Context, ns, kind, name string, grace int) error {
	opts := map[string]any{"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
	if grace >= 0 {
		opts["gracePeriodSeconds"] = grace
	}
	err := a.do(ctx, http.MethodDelete, nsPath(ns, kind, name), opts, nil)
	if isStatus(err, http.StatusNotFound) {
		return nil
	}
	return err
}

// list is the objects of kind whose labels match selector.
func (a *api) list(ctx context.Context, ns, kind, selector string, out any) error {
	return a.do(ctx, http.MethodGet, nsPath(ns, kind, "")+"?labelSelector="+url.QueryEscape(selector), nil, out)
}

// watchPod calls f with each state of the pod name from resourceVersion
// rv on, until f returns true, the pod is deleted (f gets nil), the stream
// ends or ctx is done. A stream that ends early is started again.
func (a *api) watchPod(ctx context.Context, ns, name, rv string, f func(*pod) bool) error {
	for {
		q := url.Values{"watch": {"1"}, "fieldSelector": {"metadata.name=" + name}, "allowWatchBookmarks": {"false"}, "timeoutSeconds": {"300"}}
		if rv != "" {
			q.Set("resourceVersion", rv)
		}
		req, err := a.request(ctx, http.MethodGet, nsPath(ns, "pods", "")+"?"+q.Encode(), nil, "")
		if err != nil {
			return err
		}
		resp, err := a.watch.Do(req)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return &statusError{Code: resp.StatusCode, Reason: resp.Status}
		}
		done, next, err := readEvents(resp.Body, f)
		resp.Body.Close()
		if done || err != nil {
			return err
		}
		if next != "" {
			rv = next
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// readEvents decodes a watch stream, a JSON event per line.
func readEvents(r io.Reader, f func(*pod) bool) (done bool, rv string, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 8<<20)
	for sc.Scan() {
		var ev struct {
			Type   string          `json:"type"`
			Object json.RawMessage `json:"object"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return false, rv, err
		}
		switch ev.Type {
		case "ERROR":
			se := &statusError{}
			_ = json.Unmarshal(ev.Object, se)
			if se.Code == http.StatusGone {
				return false, "", nil // too old: watch from now on
			}
			return false, rv, se
		case "DELETED":
			f(nil)
			return true, rv, nil
		case "ADDED", "MODIFIED":
			var p pod
			if err := json.Unmarshal(ev.Object, &p); err != nil {
				return false, rv, err
			}
			rv = p.Metadata.ResourceVersion
			if f(&p) {
				return true, rv, nil
			}
		}
	}
	return false, rv, sc.Err()
}
