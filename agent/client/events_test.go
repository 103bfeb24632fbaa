package client

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/agent/wire"
)

// sameAsJSON checks that DecodeEvent reads line exactly as json.Unmarshal
// does: the same event, or an error for both.
func sameAsJSON(t *testing.T, line []byte) {
	t.Helper()
	var want, got wire.Event
	werr := json.Unmarshal(line, &want)
	gerr := DecodeEvent(line, &got)
	if (werr == nil) != (gerr == nil) || werr == nil && !reflect.DeepEqual(want, got) {
		t.Fatalf("line %q: DecodeEvent %+v, %v; json.Unmarshal %+v, %v", line, got, gerr, want, werr)
	}
}

func TestDecodeEvent(t *testing.T) {
	for _, line := range []string{
		`{"type":"stdout_delta","data":"plain text"}`,
		`{"type":"stderr_delta","data":"tab\there \"quoted\" back\\slash \/ \b\f\r\n"}`,
		`{"type":"stdout_delta","data":"\u0000\u001f\u003c\u00e9\u2028\uFFFD"}`,
		`{"type":"stdout_delta","data":"é ✓ 𝄞 raw UTF-8"}`,
		`{"type":"stdout_delta","data":"\ud834\udd1e surrogate pair"}`,
		`{"type":"stdout_delta","data":"lone \ud834 surrogate"}`,
		"{\"type\":\"stdout_delta\",\"data\":\"invalid \xff UTF-8\"}",
		"{\"type\":\"stdout_delta\",\"data\":\"raw \x01 control\"}",
		`{"type":"stdout_delta","data":"bad \x escape"}`,
		`{"type":"stdout_delta","data":"short \u12"}`,
		`{"type":"stdout_delta","data":"ends in a backslash\"}`,
		`{"type":"stdout_delta","data":"a","stream":"b"}`,
		`{"type":"stdout_delta","data":"a"} `,
		`{"type":"stdout_delta","data":""}`,
		`{"type":"stdio_data","stream":"stdout","data":"aGk="}`,
		`{"type":"result","exitCode":3,"timedOut":false,"durationMs":5,"stdoutTruncated":false,"stderrTruncated":false}`,
		`{"type":"error","error":"spawn failed"}`,
		`not json`,
	} {
		sameAsJSON(t, []byte(line))
	}
}

func FuzzDecodeEvent(f *testing.F) {
	for _, s := range []string{"plain", "\x00\"\\\n\t\u2028<>&", "é𝄞", "\xff\xfe", strings.Repeat("ab\n", 100)} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, s string, raw bool) {
		// As the agent writes it, and as arbitrary bytes in the data's
		// place.
		line, _ := json.Marshal(wire.Event{Type: wire.EventStdout, Data: s})
		if raw {
			line = []byte(`{"type":"stdout_delta","data":"` + s + `"}`)
		}
		sameAsJSON(t, line)
	})
}

func BenchmarkDecodeEvent(b *testing.B) {
	text, _ := json.Marshal(wire.Event{Type: wire.EventStdout, Data: strings.Repeat("yes abcdefghijklmnopqrstuvwxyz0123456789\n", 1600)})
	zeros, _ := json.Marshal(wire.Event{Type: wire.EventStdout, Data: strings.Repeat("\x00", 64<<10)})
	for _, c := range []struct {
		name string
		line []byte
		dec  func([]byte, *wire.Event) error
	}{
		{"text", text, DecodeEvent},
		{"text-json", text, func(l []byte, ev *wire.Event) error { return json.Unmarshal(l, ev) }},
		{"zeros", zeros, DecodeEvent},
		{"zeros-json", zeros, func(l []byte, ev *wire.Event) error { return json.Unmarshal(l, ev) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.line)))
			for b.Loop() {
				var ev wire.Event
				if err := c.dec(c.line, &ev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
