package httpd

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"testing"
)

// FuzzReadRequest holds the request parser to net/http's: what it takes,
// net/http takes too, with the same method, target, framing and body.
func FuzzReadRequest(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST /execute HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc",
		"POST /p?q=1 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nT: 1\r\n\r\n",
		"PUT /files?path=a HTTP/1.0\r\nContent-Length: 1\r\nConnection: keep-alive\r\n\r\nz",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := readRequest(bufio.NewReader(bytes.NewReader(data)))
		if err != nil {
			return
		}
		ours, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		theirs, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(data)))
		if err != nil {
			t.Fatalf("net/http refuses what httpd takes: %v", err)
		}
		if r.Method != theirs.Method || r.RequestURI != theirs.RequestURI || r.URL.String() != theirs.URL.String() {
			t.Fatalf("read %s %s (%s), net/http %s %s (%s)", r.Method, r.RequestURI, r.URL, theirs.Method, theirs.RequestURI, theirs.URL)
		}
		if r.ContentLength != theirs.ContentLength {
			t.Fatalf("length %d, net/http %d", r.ContentLength, theirs.ContentLength)
		}
		b, err := io.ReadAll(theirs.Body)
		if err != nil || !bytes.Equal(b, ours) {
			t.Fatalf("body %q, net/http %q (%v)", ours, b, err)
		}
	})
}
