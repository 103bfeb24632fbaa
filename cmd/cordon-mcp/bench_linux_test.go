package main_test

import (
	"os/exec"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkMCPRunCommand: a run_command tool call (`true`) through a real
// MCP client session on stdio, cordon mcp and its private daemon, into a
// running sandbox: the tool call's round trip.
func BenchmarkMCPRunCommand(b *testing.B) {
	testutil.RequiresRoot(b)
	cordon := binaries(b)
	client := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	cs, err := client.Connect(b.Context(), &mcp.CommandTransport{Command: exec.Command(cordon, "mcp")}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(b.Context(), &mcp.CallToolParams{Name: "create_sandbox", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		b.Fatal(err, res)
	}
	id := res.StructuredContent.(map[string]any)["id"].(string)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t := time.Now()
		res, err := cs.CallTool(b.Context(), &mcp.CallToolParams{Name: "run_command", Arguments: map[string]any{"sandbox": id, "command": "true"}})
		if err != nil || res.IsError {
			b.Fatal(err, res)
		}
		lat = append(lat, time.Since(t))
	}
	testutil.ReportPercentiles(b, "", lat)
}
