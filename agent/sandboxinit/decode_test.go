package sandboxinit

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/agent/wire"
)

// randomConfig fills every exported field of a Config (reflection, so that
// a field added later is filled too) with random values, strings drawn
// with what JSON escapes.
func randomConfig(r *rand.Rand) Config {
	var c Config
	fill(r, reflect.ValueOf(&c).Elem(), 0)
	return c
}

func fill(r *rand.Rand, v reflect.Value, depth int) {
	switch v.Kind() {
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() && r.IntN(4) > 0 {
				fill(r, v.Field(i), depth+1)
			}
		}
	case reflect.Slice:
		n := r.IntN(4)
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := 0; i < n; i++ {
			fill(r, s.Index(i), depth+1)
		}
		v.Set(s)
	case reflect.String:
		pieces := []string{"/run/cordon", "a", " ", `"`, `\`, "é", "日", "\n", "\t", "\x01", "<&>", "🎉", "=", "\u2028"}
		var b strings.Builder
		for range r.IntN(6) {
			b.WriteString(pieces[r.IntN(len(pieces))])
		}
		v.SetString(b.String())
	case reflect.Bool:
		v.SetBool(r.IntN(2) == 0)
	case reflect.Int, reflect.Int64:
		v.SetInt(r.Int64() >> r.IntN(64) * int64(1-2*r.IntN(2)))
	case reflect.Uint32:
		v.SetUint(uint64(r.Uint32() >> r.IntN(32)))
	case reflect.Uint64:
		v.SetUint(r.Uint64() >> r.IntN(64))
	default:
		panic("randomConfig: a field of kind " + v.Kind().String() + " needs a case here, and in the scanner")
	}
}

// TestDecodeConfig: what the host writes (json.Marshal of a Config, every
// field set or not) is read by the scanner, not left to encoding/json, and
// read as encoding/json reads it.
func TestDecodeConfig(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	full := Config{}
	fill(rand.New(rand.NewPCG(9, 10)), reflect.ValueOf(&full).Elem(), 0)
	for i := range 3000 {
		c := randomConfig(r)
		if i == 0 {
			c = full
		}
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		var fast Config
		if s := wire.NewScanner(b); !scanConfig(s, &fast) || !s.End() {
			t.Fatalf("the scanner gave up on what the host writes:\n%s", b)
		}
		var want Config
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(fast, want) {
			t.Fatalf("%s\nscanner:       %+v\nencoding/json: %+v", b, fast, want)
		}
	}
}

// TestDecodeConfigFallsBack: what the scanner does not read goes to
// encoding/json, with its result or its error.
func TestDecodeConfigFallsBack(t *testing.T) {
	for _, in := range []string{
		`{"Stage":"/s"}`, `{"stage":null}`, `{"uid":1.0}`, `{"uid":1e3}`, `{"other":1}`,
		`{"stage":"\u00e9\/x"}`, `{"tasks":-1}`, `{"uid":01}`, `{"stage":"a"} x`, `{"env":["a",]}`,
		`{"stage":"` + "\xff" + `"}`, ` {"stage" : "/s" , "uid" : 7 } `,
		`{"tmpfs":[{"path":"a","mode":1}],"tmpfs":[{"path":"b"}]}`,
	} {
		var got, want Config
		gerr, werr := decodeConfig([]byte(in), &got), json.Unmarshal([]byte(in), &want)
		if (gerr == nil) != (werr == nil) || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: decodeConfig %+v, %v; encoding/json %+v, %v", in, got, gerr, want, werr)
		}
	}
}

// FuzzDecodeConfig: whatever the scanner reads, encoding/json reads the
// same.
func FuzzDecodeConfig(f *testing.F) {
	r := rand.New(rand.NewPCG(11, 12))
	for range 20 {
		b, _ := json.Marshal(randomConfig(r))
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var fast Config
		if s := wire.NewScanner(b); !scanConfig(s, &fast) || !s.End() {
			return
		}
		var want Config
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("the scanner read %q, encoding/json refuses it: %v", b, err)
		}
		if !reflect.DeepEqual(fast, want) {
			t.Fatalf("%q\nscanner:       %+v\nencoding/json: %+v", b, fast, want)
		}
	})
}
