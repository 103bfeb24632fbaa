package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
)

// inproc carries a request to a handler in this process, streaming both
// ways as a connection would: the daemon's own front ends (the run API)
// reach its REST API through it, as the caller they serve.
type inproc struct{ h http.Handler }

func (t inproc) RoundTrip(req *http.Request) (*http.Response, error) {
	pr, pw := io.Pipe()
	w := &pipeResponse{header: http.Header{}, body: pw, ready: make(chan struct{})}
	in := req.Clone(req.Context())
	in.RequestURI = req.URL.RequestURI()
	in.RemoteAddr = "in-process"
	if in.Body == nil {
		in.Body = http.NoBody
	}
	go func() {
		defer func() {
			p := recover()
			w.start()
			switch {
			case p == nil:
				pw.Close()
			case p == http.ErrAbortHandler:
				pw.CloseWithError(io.ErrUnexpectedEOF)
			default:
				pw.CloseWithError(fmt.Errorf("the handler failed: %v", p))
			}
		}()
		t.h.ServeHTTP(w, in)
	}()
	// As a connection's transport does: a request whose context ends has
	// its answer cut off.
	context.AfterFunc(req.Context(), func() { pr.CloseWithError(req.Context().Err()) })
	select {
	case <-w.ready:
	case <-req.Context().Done():
		pr.CloseWithError(req.Context().Err())
		return nil, req.Context().Err()
	}
	return &http.Response{Status: fmt.Sprintf("%d %s", w.status, http.StatusText(w.status)), StatusCode: w.status, Header: w.sent,
		Body: pr, Request: req, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, ContentLength: -1}, nil
}

// pipeResponse is a ResponseWriter whose body is a pipe's writing end.
type pipeResponse struct {
	header http.Header
	sent   http.Header
	status int
	body   *io.PipeWriter
	once   sync.Once
	ready  chan struct{}
}

func (w *pipeResponse) Header() http.Header { return w.header }

func (w *pipeResponse) WriteHeader(status int) {
	if status >= 100 && status < 200 {
		return
	}
	w.once.Do(func() {
		w.status, w.sent = status, w.header.Clone()
		close(w.ready)
	})
}

func (w *pipeResponse) start() { w.WriteHeader(http.StatusOK) }

func (w *pipeResponse) Write(b []byte) (int, error) {
	w.start()
	return w.body.Write(b)
}

// Flush is a no-op: every write reaches the reader as it is made.
func (w *pipeResponse) Flush() {}
