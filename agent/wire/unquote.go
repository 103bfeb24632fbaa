package wire

import (
	"unicode/utf16"
	"unicode/utf8"
)

// UnquoteString decodes the inside of a JSON string literal in one pass
// (encoding/json takes three). It reports false for anything it does not
// decode exactly as encoding/json does, which the caller then leaves to
// encoding/json: an unescaped quote or control character (then s is not one
// string), invalid UTF-8 (which encoding/json replaces), a surrogate escape,
// a malformed escape.
func UnquoteString(s []byte) (string, bool) {
	i := 0
	for i < len(s) && s[i] >= 0x20 && s[i] < utf8.RuneSelf && s[i] != '"' && s[i] != '\\' {
		i++
	}
	if i == len(s) {
		return string(s), true
	}
	if !utf8.Valid(s[i:]) {
		return "", false
	}
	b := make([]byte, i, len(s))
	copy(b, s[:i])
	for i < len(s) {
		c := s[i]
		if c == '"' || c < 0x20 {
			return "", false
		}
		if c != '\\' {
			j := i + 1
			for j < len(s) && s[j] >= 0x20 && s[j] != '"' && s[j] != '\\' {
				j++
			}
			b = append(b, s[i:j]...)
			i = j
			continue
		}
		if i+1 == len(s) {
			return "", false
		}
		switch e := s[i+1]; e {
		case '"', '\\', '/':
			b = append(b, e)
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			r, ok := hex4(s[i+2:])
			if !ok || utf16.IsSurrogate(r) {
				return "", false
			}
			b = utf8.AppendRune(b, r)
			i += 4
		default:
			return "", false
		}
		i += 2
	}
	return string(b), true
}

// hex4 reads the four hex digits that open s.
func hex4(s []byte) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range s[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}
