package printable_test

import (
	"testing"

	"github.com/cordon-sandbox/cordon/internal/printable"
)

func TestString(t *testing.T) {
	for in, want := range map[string]string{
		"plain text, ünïcode & 符号": "plain text, ünïcode & 符号",
		"":                         "",
		"\x1b[2Jred":               `"\x1b[2Jred"`,
		"a\nforged line":           `"a\nforged line"`,
		"tab\there":                `"tab\there"`,
		"\u009b31m":                `"\u009b31m"`, // a C1 control: CSI on some terminals
		"\u202eevil.test":          `"\u202eevil.test"`,
		"zero\u200bwidth":          `"zero\u200bwidth"`,
		"bad \xff byte":            `"bad \xff byte"`,
		`quote " and \ alone`:      `quote " and \ alone`,
	} {
		if got := printable.String(in); got != want {
			t.Errorf("String(%q) = %s, want %s", in, got, want)
		}
		if printable.Valid(in) != (in == printable.String(in)) {
			t.Errorf("Valid(%q) = %v, disagreeing with String", in, printable.Valid(in))
		}
	}
}
