package client

import (
	"bytes"
	"encoding/json"

	"github.com/cordon-sandbox/cordon/agent/wire"
)

// outputOpenings are the exact openings of output events as the agent and
// the reference worker write them.
var outputOpenings = [...]struct {
	typ     string
	opening []byte
}{
	{wire.EventStdout, []byte(`{"type":"` + wire.EventStdout + `","data":"`)},
	{wire.EventStderr, []byte(`{"type":"` + wire.EventStderr + `","data":"`)},
}

// DecodeEvent reads one event line (without its newline) exactly as
// json.Unmarshal(line, ev) does, with a fast path for the output events
// that carry most of a stream's bytes. json.Unmarshal passes over a
// line three times (validation, scanning, unquoting); wire.UnquoteString
// once.
// Whatever the fast path does not decode exactly as encoding/json would is
// left to encoding/json.
func DecodeEvent(line []byte, ev *wire.Event) error {
	for _, o := range outputOpenings {
		body, ok := bytes.CutPrefix(line, o.opening)
		if !ok {
			continue
		}
		if s, ok := bytes.CutSuffix(body, []byte(`"}`)); ok {
			if data, ok := wire.UnquoteString(s); ok {
				*ev = wire.Event{Type: o.typ, Data: data}
				return nil
			}
		}
		break
	}
	return json.Unmarshal(line, ev)
}
