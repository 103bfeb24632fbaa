package sandboxinit

import (
	"encoding/json"
	"strconv"

	"github.com/cordon-sandbox/cordon/agent/wire"
)

// decodeConfig decodes the host's configuration. encoding/json's first
// decoding of a type costs some 0.3 ms in a fresh process (reflection over
// the type, and the package's code paged in), and every init is one: the
// JSON the host writes is read by a scanner of its own, which gives up on
// anything else (another key, a null, a float, an escape it does not
// decode exactly as encoding/json does) and leaves it all to
// encoding/json. Where the scanner succeeds its result is encoding/json's
// (decode_test.go, FuzzDecodeConfig).
func decodeConfig(b []byte, cfg *Config) error {
	var c Config
	if s := (scanner{b: b}); s.config(&c) && s.end() {
		*cfg = c
		return nil
	}
	return json.Unmarshal(b, cfg)
}

// scanner reads the JSON the host writes: each method reports false for
// anything it does not read exactly as encoding/json would.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) space() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\n' || s.b[s.i] == '\r') {
		s.i++
	}
}

// next consumes c, after white space, if it comes next.
func (s *scanner) next(c byte) bool {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// end reports whether only white space is left.
func (s *scanner) end() bool {
	s.space()
	return s.i == len(s.b)
}

func (s *scanner) str(v *string) bool {
	if !s.next('"') {
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
	str, ok := wire.UnquoteString(s.b[start:s.i])
	s.i++
	*v = str
	return ok
}

func (s *scanner) boolean(v *bool) bool {
	s.space()
	for _, lit := range []string{"true", "false"} {
		if len(s.b)-s.i >= len(lit) && string(s.b[s.i:s.i+len(lit)]) == lit {
			s.i += len(lit)
			*v = lit == "true"
			return true
		}
	}
	return false
}

// integer reads a JSON integer (no fraction, no exponent, no leading zero)
// that fits bits, signed or not.
func (s *scanner) integer(bits int, signed bool) (int64, uint64, bool) {
	s.space()
	start := s.i
	if s.i < len(s.b) && s.b[s.i] == '-' {
		if !signed {
			return 0, 0, false
		}
		s.i++
	}
	digits := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	n := s.i - digits
	if n == 0 || n > 1 && s.b[digits] == '0' {
		return 0, 0, false
	}
	if s.i < len(s.b) && (s.b[s.i] == '.' || s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		return 0, 0, false
	}
	lit := string(s.b[start:s.i])
	if signed {
		v, err := strconv.ParseInt(lit, 10, bits)
		return v, 0, err == nil
	}
	v, err := strconv.ParseUint(lit, 10, bits)
	return 0, v, err == nil
}

func (s *scanner) int(v *int) bool {
	n, _, ok := s.integer(strconv.IntSize, true)
	*v = int(n)
	return ok
}

func (s *scanner) int64(v *int64) bool {
	n, _, ok := s.integer(64, true)
	*v = n
	return ok
}

func (s *scanner) uint32(v *uint32) bool {
	_, n, ok := s.integer(32, false)
	*v = uint32(n)
	return ok
}

func (s *scanner) uint64(v *uint64) bool {
	_, n, ok := s.integer(64, false)
	*v = n
	return ok
}

// object reads an object, calling field for each key; field reads the
// value and reports whether it could.
func (s *scanner) object(field func(key string) bool) bool {
	if !s.next('{') {
		return false
	}
	if s.next('}') {
		return true
	}
	for {
		var key string
		if !s.str(&key) || !s.next(':') || !field(key) {
			return false
		}
		if s.next('}') {
			return true
		}
		if !s.next(',') {
			return false
		}
	}
}

// null consumes a null, if one comes next.
func (s *scanner) null() bool {
	s.space()
	if len(s.b)-s.i >= 4 && string(s.b[s.i:s.i+4]) == "null" {
		s.i += 4
		return true
	}
	return false
}

// array reads an array, calling elem for each element, after start (which
// makes the slice empty). A null is a nil slice, as json.Marshal writes
// one: then start is not called.
func (s *scanner) array(start func(), elem func() bool) bool {
	if s.null() {
		return true
	}
	if !s.next('[') {
		return false
	}
	start()
	if s.next(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if s.next(']') {
			return true
		}
		if !s.next(',') {
			return false
		}
	}
}

func (s *scanner) config(c *Config) bool {
	// A key given twice is left to encoding/json, which decodes a second
	// array into the elements of the first.
	seen := map[string]bool{}
	return s.object(func(key string) bool {
		if seen[key] {
			return false
		}
		seen[key] = true
		switch key {
		case "stage":
			return s.str(&c.Stage)
		case "rootfs":
			return s.str(&c.RootFS)
		case "hostRoot":
			return s.boolean(&c.HostRoot)
		case "tmpfs":
			c.Tmpfs = nil
			return s.array(func() { c.Tmpfs = []Tmpfs{} }, func() bool {
				var t Tmpfs
				ok := s.object(func(key string) bool {
					switch key {
					case "path":
						return s.str(&t.Path)
					case "mode":
						return s.uint32(&t.Mode)
					case "owned":
						return s.boolean(&t.Owned)
					}
					return false
				})
				c.Tmpfs = append(c.Tmpfs, t)
				return ok
			})
		case "scratchBytes":
			return s.int64(&c.ScratchBytes)
		case "scratchMount":
			return s.str(&c.ScratchMount)
		case "binds":
			c.Binds = nil
			return s.array(func() { c.Binds = []Bind{} }, func() bool {
				var b Bind
				ok := s.object(func(key string) bool {
					switch key {
					case "source":
						return s.str(&b.Source)
					case "target":
						return s.str(&b.Target)
					case "readOnly":
						return s.boolean(&b.ReadOnly)
					case "tree":
						return s.int(&b.Tree)
					case "file":
						return s.boolean(&b.File)
					case "content":
						return s.str(&b.Content)
					}
					return false
				})
				c.Binds = append(c.Binds, b)
				return ok
			})
		case "socketDir":
			return s.str(&c.SocketDir)
		case "uid":
			return s.int(&c.UID)
		case "gid":
			return s.int(&c.GID)
		case "hostname":
			return s.str(&c.Hostname)
		case "landlock":
			return s.str(&c.Landlock)
		case "env":
			c.Env = nil
			return s.array(func() { c.Env = []string{} }, func() bool {
				var e string
				ok := s.str(&e)
				c.Env = append(c.Env, e)
				return ok
			})
		case "workdir":
			return s.str(&c.Workdir)
		case "detached":
			return s.boolean(&c.Detached)
		case "tasks":
			return s.uint64(&c.Tasks)
		}
		return false
	})
}
