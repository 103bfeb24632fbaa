package sandboxinit

import (
	"encoding/json"
	"strconv"

	"github.com/cordon-sandbox/cordon/agent/wire"
)

// decodeConfig decodes the host's configuration. encoding/json's first
// decoding of a type costs some 0.3 ms in a fresh process (reflection over
// the type, and the package's code paged in), and every init is one: the
// JSON the host writes is read by wire.Scanner, which gives up on anything
// else (another key, a key twice, a float, an escape it does not decode
// exactly as encoding/json does) and leaves it all to encoding/json. Where
// the scanner succeeds its result is encoding/json's (decode_test.go,
// FuzzDecodeConfig).
func decodeConfig(b []byte, cfg *Config) error {
	var c Config
	if s := wire.NewScanner(b); scanConfig(s, &c) && s.End() {
		*cfg = c
		return nil
	}
	return json.Unmarshal(b, cfg)
}

func scanInt(s *wire.Scanner, v *int) bool {
	var n int64
	ok := s.Int64(&n, strconv.IntSize)
	*v = int(n)
	return ok
}

func scanUint32(s *wire.Scanner, v *uint32) bool {
	var n uint64
	ok := s.Uint64(&n, 32)
	*v = uint32(n)
	return ok
}

func scanConfig(s *wire.Scanner, c *Config) bool {
	// A key given twice is left to encoding/json, which decodes a second
	// array into the elements of the first.
	seen := map[string]bool{}
	return s.Object(func(key string) bool {
		if seen[key] {
			return false
		}
		seen[key] = true
		switch key {
		case "stage":
			return s.String(&c.Stage)
		case "rootfs":
			return s.String(&c.RootFS)
		case "hostRoot":
			return s.Bool(&c.HostRoot)
		case "tmpfs":
			c.Tmpfs = nil
			return s.Array(func() { c.Tmpfs = []Tmpfs{} }, func() bool {
				var t Tmpfs
				ok := s.Object(func(key string) bool {
					switch key {
					case "path":
						return s.String(&t.Path)
					case "mode":
						return scanUint32(s, &t.Mode)
					case "owned":
						return s.Bool(&t.Owned)
					}
					return false
				})
				c.Tmpfs = append(c.Tmpfs, t)
				return ok
			})
		case "scratchBytes":
			return s.Int64(&c.ScratchBytes, 64)
		case "scratchMount":
			return s.String(&c.ScratchMount)
		case "scratchOnDisk":
			return s.Bool(&c.ScratchOnDisk)
		case "binds":
			c.Binds = nil
			return s.Array(func() { c.Binds = []Bind{} }, func() bool {
				var b Bind
				ok := s.Object(func(key string) bool {
					switch key {
					case "source":
						return s.String(&b.Source)
					case "target":
						return s.String(&b.Target)
					case "readOnly":
						return s.Bool(&b.ReadOnly)
					case "tree":
						return scanInt(s, &b.Tree)
					case "file":
						return s.Bool(&b.File)
					case "content":
						return s.String(&b.Content)
					}
					return false
				})
				c.Binds = append(c.Binds, b)
				return ok
			})
		case "uid":
			return scanInt(s, &c.UID)
		case "gid":
			return scanInt(s, &c.GID)
		case "agentUid":
			return scanInt(s, &c.AgentUID)
		case "hostname":
			return s.String(&c.Hostname)
		case "landlock":
			return s.String(&c.Landlock)
		case "env":
			c.Env = nil
			return s.Array(func() { c.Env = []string{} }, func() bool {
				var e string
				ok := s.String(&e)
				c.Env = append(c.Env, e)
				return ok
			})
		case "workdir":
			return s.String(&c.Workdir)
		case "detached":
			return s.Bool(&c.Detached)
		case "tasks":
			return s.Uint64(&c.Tasks, 64)
		case "rootBuilder":
			return scanInt(s, &c.RootBuilder)
		case "commandsApart":
			return s.Bool(&c.CommandsApart)
		case "placedTrees":
			return scanInt(s, &c.PlacedTrees)
		}
		return false
	})
}
