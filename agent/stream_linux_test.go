package agent

import (
	"bytes"
	"encoding/base64"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/agent/internal/httpd"
	"github.com/cordon-sandbox/cordon/agent/wire"
)

// recorder is an httpd.ResponseWriter that keeps the body.
type recorder struct {
	header httpd.Header
	Body   bytes.Buffer
}

func newRecorder() *recorder                         { return &recorder{header: httpd.Header{}} }
func (r *recorder) Header() httpd.Header             { return r.header }
func (r *recorder) WriteHeader(int)                  {}
func (r *recorder) Write(p []byte) (int, error)      { return r.Body.Write(p) }
func (r *recorder) Flush() error                     { return nil }
func (r *recorder) SetWriteDeadline(time.Time) error { return nil }

// TestEventLine: an output event is one line in the exact shape clients
// decode fastest (client.DecodeEvent), with '<', '>' and '&' as they are.
func TestEventLine(t *testing.T) {
	rec := newRecorder()
	newEventStream(rec).send(wire.Event{Type: wire.EventStdout, Data: "<a & b>\n\"q\"\x00é"})
	want := `{"type":"stdout_delta","data":"<a & b>\n\"q\"\u0000é"}` + "\n"
	if got := rec.Body.String(); got != want {
		t.Fatalf("line %q, want %q", got, want)
	}
}

// TestBase64EventLine: the lines sendBase64 writes by hand are those send
// writes for the same events.
func TestBase64EventLine(t *testing.T) {
	chunk := []byte("\xff\x00<&>\"\\ é")
	for _, stream := range []string{"", "stderr"} {
		typ := wire.EventStdout
		if stream != "" {
			typ = wire.EventStdioData
		}
		direct, viaJSON := newRecorder(), newRecorder()
		newEventStream(direct).sendBase64(typ, stream, chunk)
		newEventStream(viaJSON).send(wire.Event{Type: typ, Stream: stream, Data: base64.StdEncoding.EncodeToString(chunk)})
		if direct.Body.String() != viaJSON.Body.String() {
			t.Fatalf("line %q, want %q", direct.Body.String(), viaJSON.Body.String())
		}
	}
}
