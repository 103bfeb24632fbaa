//go:build linux

package agent

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/cordon-sandbox/cordon/agent/wire"
)

// TestScanExecuteBody: what the Go client sends is read by the scanner,
// not left to encoding/json, and read as encoding/json reads it.
func TestScanExecuteBody(t *testing.T) {
	stdin := "line\n\"quoted\" é \u2028"
	for _, req := range []wire.ExecuteRequest{
		{Command: "true"},
		{ExecutionID: "exec_0f0e0d0c-0b0a-4908-8706-050403020100", Command: "sh", Args: []string{"-c", "echo \"$X\" <&>"}, Cwd: "sub/dir",
			Env: map[string]string{"X": "1", "Y": "tab\there"}, Stdin: &stdin, StdinEncoding: "", OutputEncoding: wire.Base64,
			TimeoutMs: 30000, MaxOutputBytes: 1 << 20, Stdio: false, NormalExitPolicy: wire.PolicyStrict},
		{ExecutionID: "exec_0f0e0d0c-0b0a-4908-8706-050403020100", Command: "cat", Stdio: true},
	} {
		b, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		var fast executeBody
		if !scanExecuteBody(b, &fast) {
			t.Fatalf("the scanner gave up on what the client sends: %s", b)
		}
		var want executeBody
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		if !sameBody(fast, want) {
			t.Fatalf("%s\nscanner:       %+v\nencoding/json: %+v", b, fast, want)
		}
	}
}

// sameBody compares two bodies field by field, as bytes.
func sameBody(a, b executeBody) bool {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	for i := 0; i < va.NumField(); i++ {
		x, y := va.Field(i).Bytes(), vb.Field(i).Bytes()
		if (x == nil) != (y == nil) || !bytes.Equal(x, y) {
			return false
		}
	}
	return true
}

// FuzzDecodeExecuteBody: whatever the scanner reads, encoding/json reads
// the same; and decodeExecuteBody, scanner or not, answers as
// encoding/json does.
func FuzzDecodeExecuteBody(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"command":"true"}`, `{"command":"sh","args":["-c","x"],"env":{"A":"b"},"timeoutMs":1.5e3}`,
		`{"stdio":true,"executionId":"exec_x","stdin":null}`, `{"Command":"x"}`, `{"command":[[[{"a":[1,-0,2e-3]}]]]}`,
		` { "cwd" : "\u00e9" , "maxOutputBytes" : -12 } `, `{"command":"a","command":"b"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var fast executeBody
		scanned := scanExecuteBody(b, &fast)
		var want executeBody
		werr := json.Unmarshal(b, &want)
		if scanned && (werr != nil || !sameBody(fast, want)) {
			t.Fatalf("%q\nscanner:       %+v\nencoding/json: %+v, %v", b, fast, want, werr)
		}
		var got executeBody
		if gerr := decodeExecuteBody(b, &got); (gerr == nil) != (werr == nil) || gerr == nil && !sameBody(got, want) {
			t.Fatalf("%q: decodeExecuteBody %+v, %v; encoding/json %+v, %v", b, got, gerr, want, werr)
		}
	})
}
