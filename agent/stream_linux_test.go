package agent

import (
	"net/http/httptest"
	"testing"

	"github.com/cordon-sandbox/cordon/agent/wire"
)

// TestEventLine: an output event is one line in the exact shape clients
// decode fastest (client.DecodeEvent), with '<', '>' and '&' as they are.
func TestEventLine(t *testing.T) {
	rec := httptest.NewRecorder()
	newEventStream(rec).send(wire.Event{Type: wire.EventStdout, Data: "<a & b>\n\"q\"\x00é"})
	want := `{"type":"stdout_delta","data":"<a & b>\n\"q\"\u0000é"}` + "\n"
	if got := rec.Body.String(); got != want {
		t.Fatalf("line %q, want %q", got, want)
	}
}
