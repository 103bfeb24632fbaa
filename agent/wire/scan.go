package wire

import "strconv"

// Scanner reads the JSON a known writer produces, on paths where
// encoding/json's first decoding of a type in a fresh process (some 0.2–0.3
// ms: reflection over the type, and the package's code paged in) would be
// paid by every sandbox: the init's configuration, the agent's /execute
// body. Each method reports false for anything it does not read exactly as
// encoding/json would (a value it does not know, a float where an integer
// goes, an escape UnquoteString leaves alone, deep nesting); its caller
// then leaves the whole input to encoding/json. What it reads, it reads as
// encoding/json does (held to it by the callers' tests and fuzz targets).
type Scanner struct {
	b []byte
	i int
}

// NewScanner returns a Scanner over b.
func NewScanner(b []byte) *Scanner { return &Scanner{b: b} }

func (s *Scanner) space() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\n' || s.b[s.i] == '\r') {
		s.i++
	}
}

// Next consumes c, after white space, if it comes next.
func (s *Scanner) Next(c byte) bool {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// End reports whether only white space is left.
func (s *Scanner) End() bool {
	s.space()
	return s.i == len(s.b)
}

// literal consumes lit, after white space, if it comes next.
func (s *Scanner) literal(lit string) bool {
	s.space()
	if len(s.b)-s.i >= len(lit) && string(s.b[s.i:s.i+len(lit)]) == lit {
		s.i += len(lit)
		return true
	}
	return false
}

// Null consumes a null, if one comes next.
func (s *Scanner) Null() bool { return s.literal("null") }

// String reads a string.
func (s *Scanner) String(v *string) bool {
	if !s.Next('"') {
		return false
	}
	start := s.i
	for s.i < len(s.b) && s.b[s.i] != '"' {
		if s.b[s.i] == '\\' {
			s.i++
		}
		s.i++
	}
	if s.i >= len(s.b) {
		return false
	}
	str, ok := UnquoteString(s.b[start:s.i])
	s.i++
	*v = str
	return ok
}

// Bool reads true or false.
func (s *Scanner) Bool(v *bool) bool {
	switch {
	case s.literal("true"):
		*v = true
	case s.literal("false"):
		*v = false
	default:
		return false
	}
	return true
}

// number consumes a JSON number and returns its text, and whether it is an
// integer (no fraction, no exponent).
func (s *Scanner) number() (lit string, integer, ok bool) {
	s.space()
	start := s.i
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	digits := s.digits()
	if digits == 0 || digits > 1 && s.b[s.i-digits] == '0' {
		return "", false, false
	}
	integer = true
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if s.digits() == 0 {
			return "", false, false
		}
		integer = false
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if s.digits() == 0 {
			return "", false, false
		}
		integer = false
	}
	return string(s.b[start:s.i]), integer, true
}

func (s *Scanner) digits() int {
	start := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i - start
}

// Int64 reads an integer that fits bits, as encoding/json reads one into an
// int of that size.
func (s *Scanner) Int64(v *int64, bits int) bool {
	lit, integer, ok := s.number()
	if !ok || !integer {
		return false
	}
	n, err := strconv.ParseInt(lit, 10, bits)
	*v = n
	return err == nil
}

// Uint64 reads a non-negative integer that fits bits.
func (s *Scanner) Uint64(v *uint64, bits int) bool {
	lit, integer, ok := s.number()
	if !ok || !integer {
		return false
	}
	n, err := strconv.ParseUint(lit, 10, bits)
	*v = n
	return err == nil
}

// Object reads an object, calling field for each key; field reads the
// value and reports whether it could.
func (s *Scanner) Object(field func(key string) bool) bool {
	if !s.Next('{') {
		return false
	}
	if s.Next('}') {
		return true
	}
	for {
		var key string
		if !s.String(&key) || !s.Next(':') || !field(key) {
			return false
		}
		if s.Next('}') {
			return true
		}
		if !s.Next(',') {
			return false
		}
	}
}

// Array reads an array, calling elem for each element, after start (which
// makes the slice empty). A null is a nil slice, as json.Marshal writes
// one: then start is not called.
func (s *Scanner) Array(start func(), elem func() bool) bool {
	if s.Null() {
		return true
	}
	if !s.Next('[') {
		return false
	}
	start()
	if s.Next(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if s.Next(']') {
			return true
		}
		if !s.Next(',') {
			return false
		}
	}
}

// maxRawDepth bounds the nesting Raw reads; deeper is left to
// encoding/json.
const maxRawDepth = 8

// Raw reads any one value and sets v to its bytes, as encoding/json sets a
// json.RawMessage (the same backing array as the input).
func (s *Scanner) Raw(v *[]byte) bool {
	s.space()
	start := s.i
	if !s.skip(0) {
		return false
	}
	*v = s.b[start:s.i:s.i]
	return true
}

func (s *Scanner) skip(depth int) bool {
	if depth > maxRawDepth {
		return false
	}
	s.space()
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '"':
		var str string
		return s.String(&str)
	case c == '{':
		return s.Object(func(string) bool { return s.skip(depth + 1) })
	case c == '[':
		return s.Array(func() {}, func() bool { return s.skip(depth + 1) })
	case c == 't' || c == 'f':
		var b bool
		return s.Bool(&b)
	case c == 'n':
		return s.Null()
	default:
		_, _, ok := s.number()
		return ok
	}
}
