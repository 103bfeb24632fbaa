package host

import (
	"errors"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/sandbox"
)

func TestSocketPath(t *testing.T) {
	if err := SocketPath("/" + strings.Repeat("a", MaxSocketPath-1)); err != nil {
		t.Fatalf("a path of %d bytes: %v", MaxSocketPath, err)
	}
	err := SocketPath("/" + strings.Repeat("a", MaxSocketPath))
	if !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), "108 bytes long") {
		t.Fatalf("a path of %d bytes: %v", MaxSocketPath+1, err)
	}
}
