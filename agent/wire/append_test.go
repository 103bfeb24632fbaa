package wire

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
)

// encode is what encoding/json writes for v: json.Marshal's bytes with
// html, an Encoder's line (without its newline) otherwise.
func encode(t testing.TB, v any, html bool) []byte {
	t.Helper()
	if html {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// oddStrings are the strings every encoder here is checked with: each
// escape encoding/json makes, and what it replaces.
var oddStrings = []string{
	"", "SIGKILL", "SIG64", `quote " and \ backslash`, "<a href='x'>&amp;</a>",
	"\x00\x01\x1f\x7f", "\b\f\n\r\t", "é ü 日本 🎉", "\xff\xfe bad \xc3", "\u2028\u2029",
	"exec_0f0e0d0c-0b0a-4908-8706-050403020100", "computer-lifetime",
}

// randomString mixes the bytes encoding/json treats apart.
func randomString(r *rand.Rand) string {
	pieces := []string{"a", "Z", "0", " ", `"`, `\`, "<", ">", "&", "\n", "\x00", "\x1f", "\x7f", "é", "\u2028", "\u2029", "🎉", "\xff", "\xc3", "\xe2\x80"}
	var b []byte
	for range r.IntN(12) {
		b = append(b, pieces[r.IntN(len(pieces))]...)
	}
	return string(b)
}

func TestAppendString(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	ss := append([]string{}, oddStrings...)
	for range 5000 {
		ss = append(ss, randomString(r))
	}
	for _, s := range ss {
		for _, html := range []bool{true, false} {
			if got, want := AppendString(nil, s, html), encode(t, s, html); !bytes.Equal(got, want) {
				t.Fatalf("AppendString(%q, html %v) = %s, encoding/json: %s", s, html, got, want)
			}
		}
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range oddStrings {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, html := range []bool{true, false} {
			if got, want := AppendString(nil, s, html), encode(t, s, html); !bytes.Equal(got, want) {
				t.Fatalf("AppendString(%q, html %v) = %s, encoding/json: %s", s, html, got, want)
			}
		}
	})
}

func TestAppendResultEvent(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	results := []Result{{}, {ExitCode: -1, Signal: "SIGKILL", TimedOut: true, DurationMs: 30000, StdoutTruncated: true, StderrTruncated: true}}
	for _, s := range oddStrings {
		results = append(results, Result{ExitCode: 137, Signal: s})
	}
	for range 2000 {
		results = append(results, Result{
			ExitCode: r.IntN(512) - 256, TimedOut: r.IntN(2) == 0, DurationMs: r.Int64() >> r.IntN(63),
			Signal: randomString(r), StdoutTruncated: r.IntN(2) == 0, StderrTruncated: r.IntN(2) == 0,
		})
	}
	for _, res := range results {
		want := append(encode(t, Event{Type: EventResult, Result: &res}, false), '\n')
		if got := AppendResultEvent(nil, &res); !bytes.Equal(got, want) {
			t.Fatalf("AppendResultEvent(%+v) = %s, encoding/json: %s", res, got, want)
		}
	}
}

func TestAppendReadyRecord(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	recs := []ReadyRecord{{}, {Health: Health{OK: true, ProtocolVersion: ProtocolVersion}}}
	for range 2000 {
		rec := ReadyRecord{Health: Health{OK: r.IntN(2) == 0, ProtocolVersion: r.IntN(5), BootID: randomString(r)}}
		for range r.IntN(4) {
			rec.Health.Features = append(rec.Health.Features, randomString(r))
		}
		if r.IntN(2) == 0 {
			rec.Health.Activity = &Activity{Running: r.IntN(9), Requests: r.IntN(9), IdleMs: r.Int64() >> r.IntN(63)}
		}
		if r.IntN(3) > 0 {
			rec.Spare = &Reservation{
				OK: r.IntN(2) == 0, ProtocolVersion: ProtocolVersion, ExecutionID: randomString(r),
				LeaseExpiresAt: r.Int64() >> r.IntN(63), NormalExitPolicy: randomString(r),
				Stdio: StdioInfo{Version: r.IntN(3), MaxLifetimeMs: r.Int64() >> r.IntN(63)},
			}
		}
		if r.IntN(2) == 0 {
			rec.CommandThread = r.IntN(1 << 22)
		}
		recs = append(recs, rec)
	}
	for _, rec := range recs {
		if got, want := AppendReadyRecord(nil, &rec), encode(t, rec, true); !bytes.Equal(got, want) {
			t.Fatalf("AppendReadyRecord(%+v) = %s, json.Marshal: %s", rec, got, want)
		}
	}
}
