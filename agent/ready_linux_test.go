package agent

import (
	"io"
	"os"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// TestReadyFromFD: the descriptor CORDON_AGENT_READY_FD names gets the ready
// record and is closed after it; a name that is not an open descriptor
// above 2 is refused before the agent serves.
func TestReadyFromFD(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	fd, err := unix.Dup(int(w.Fd()))
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	ready, err := readyFromFD([]string{EnvPrefix + "READY_FD=" + strconv.Itoa(fd)})
	if err != nil || ready == nil {
		t.Fatalf("readyFromFD: %v", err)
	}
	ready([]byte(`{"health":{}}`))
	got, err := io.ReadAll(r)
	if err != nil || string(got) != `{"health":{}}` {
		t.Fatalf("the host read %q, %v", got, err)
	}
	if ready, err := readyFromFD(nil); ready != nil || err != nil {
		t.Fatalf("no variable: got a writer or %v", err)
	}
	for _, bad := range []string{"1", "-3", "x", strconv.Itoa(fd)} { // fd is closed by now
		if _, err := readyFromFD([]string{EnvPrefix + "READY_FD=" + bad}); err == nil {
			t.Errorf("READY_FD=%s accepted", bad)
		}
	}
}
