package wire

import (
	"strconv"
	"unicode/utf8"
)

// The agent's two messages on every sandbox's path to its first result,
// written without encoding/json: the first encoding of a type there costs
// some 0.3 ms in a fresh process (reflection over the type, and the
// package's code paged in), and a sandbox's agent is always a fresh
// process. Each writes exactly what encoding/json writes for the same value
// (append_test.go holds them to it).

// AppendResultEvent appends the result event for r as one NDJSON line,
// byte for byte what a json.Encoder with HTML escaping off writes for
// Event{Type: EventResult, Result: r}.
func AppendResultEvent(b []byte, r *Result) []byte {
	b = append(b, `{"type":"`+EventResult+`","exitCode":`...)
	b = strconv.AppendInt(b, int64(r.ExitCode), 10)
	b = append(b, `,"timedOut":`...)
	b = strconv.AppendBool(b, r.TimedOut)
	b = append(b, `,"durationMs":`...)
	b = strconv.AppendInt(b, r.DurationMs, 10)
	if r.Signal != "" {
		b = append(b, `,"signal":`...)
		b = AppendString(b, r.Signal, false)
	}
	b = append(b, `,"stdoutTruncated":`...)
	b = strconv.AppendBool(b, r.StdoutTruncated)
	b = append(b, `,"stderrTruncated":`...)
	b = strconv.AppendBool(b, r.StderrTruncated)
	if r.OOMKills != 0 {
		b = append(b, `,"oomKills":`...)
		b = strconv.AppendInt(b, r.OOMKills, 10)
	}
	if r.LeftoversStopped {
		b = append(b, `,"leftoversStopped":true`...)
	}
	return append(b, "}\n"...)
}

// AppendReadyRecord appends rec, byte for byte what json.Marshal writes.
func AppendReadyRecord(b []byte, rec *ReadyRecord) []byte {
	h := &rec.Health
	b = append(b, `{"health":{"ok":`...)
	b = strconv.AppendBool(b, h.OK)
	b = append(b, `,"protocolVersion":`...)
	b = strconv.AppendInt(b, int64(h.ProtocolVersion), 10)
	if len(h.Features) > 0 {
		b = append(b, `,"features":[`...)
		for i, f := range h.Features {
			if i > 0 {
				b = append(b, ',')
			}
			b = AppendString(b, f, true)
		}
		b = append(b, ']')
	}
	if h.BootID != "" {
		b = append(b, `,"bootId":`...)
		b = AppendString(b, h.BootID, true)
	}
	if a := h.Activity; a != nil {
		b = append(b, `,"activity":{"running":`...)
		b = strconv.AppendInt(b, int64(a.Running), 10)
		b = append(b, `,"requests":`...)
		b = strconv.AppendInt(b, int64(a.Requests), 10)
		b = append(b, `,"idleMs":`...)
		b = strconv.AppendInt(b, a.IdleMs, 10)
		b = append(b, '}')
	}
	b = append(b, '}')
	if s := rec.Spare; s != nil {
		b = append(b, `,"spare":{"ok":`...)
		b = strconv.AppendBool(b, s.OK)
		b = append(b, `,"protocolVersion":`...)
		b = strconv.AppendInt(b, int64(s.ProtocolVersion), 10)
		b = append(b, `,"executionId":`...)
		b = AppendString(b, s.ExecutionID, true)
		b = append(b, `,"leaseExpiresAt":`...)
		b = strconv.AppendInt(b, s.LeaseExpiresAt, 10)
		b = append(b, `,"normalExitPolicy":`...)
		b = AppendString(b, s.NormalExitPolicy, true)
		b = append(b, `,"stdio":{"version":`...)
		b = strconv.AppendInt(b, int64(s.Stdio.Version), 10)
		b = append(b, `,"maxLifetimeMs":`...)
		b = strconv.AppendInt(b, s.Stdio.MaxLifetimeMs, 10)
		b = append(b, "}}"...)
	}
	if rec.CommandThread != 0 {
		b = append(b, `,"commandThread":`...)
		b = strconv.AppendInt(b, int64(rec.CommandThread), 10)
	}
	return append(b, '}')
}

// AppendString appends s as a JSON string the way encoding/json writes it:
// invalid UTF-8 as U+FFFD, U+2028 and U+2029 escaped, and with html also
// '<', '>' and '&' (json.Marshal's default; an Encoder may turn it off).
func AppendString(b []byte, s string, html bool) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && (!html || c != '<' && c != '>' && c != '&') {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
