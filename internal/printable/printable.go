// Package printable renders text that someone else chose (a tenant's
// labels, the host names a sandbox asks its proxy for) for a terminal or a
// log line, so that none of its characters acts on the terminal: no
// control character (an escape sequence, a carriage return, a newline
// that forges a line), no format character (a bidirectional override that
// reorders what is shown).
package printable

import (
	"strconv"
	"unicode/utf8"
)

// Valid reports whether s is valid UTF-8 made of graphic characters
// alone (letters, marks, numbers, punctuation, symbols and spaces, as
// strconv.IsGraphic has them).
func Valid(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !strconv.IsGraphic(r) {
			return false
		}
	}
	return true
}

// String is s where it is Valid, and otherwise s quoted, its other
// characters (and invalid bytes) escaped, as Go writes them: the quotes
// say that it was.
func String(s string) string {
	if Valid(s) {
		return s
	}
	return strconv.QuoteToGraphic(s)
}
