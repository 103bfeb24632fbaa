package wire

import (
	"encoding/json"
	"testing"
)

// FuzzUnquoteString: whatever UnquoteString decodes, encoding/json decodes
// to the same string.
func FuzzUnquoteString(f *testing.F) {
	for _, s := range []string{"", "plain", `a\"b\\c\/d\n\r\t\b\f`, `\u003cb\u003e \u00e9 \u2028`, "é\xff", `\ud83d\ude00`, `"`, "\x01", `\`, `\u12`, `\x`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := UnquoteString([]byte(s))
		if !ok {
			return
		}
		var want string
		if err := json.Unmarshal([]byte(`"`+s+`"`), &want); err != nil {
			t.Fatalf("UnquoteString(%q) = %q, but encoding/json refuses it: %v", s, got, err)
		}
		if got != want {
			t.Fatalf("UnquoteString(%q) = %q, encoding/json %q", s, got, want)
		}
	})
}
