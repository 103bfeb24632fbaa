package conformance

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/agent/wire"
)

// TerminalEcho measures keystroke echo on a terminal session through c:
// n keystrokes typed into `cat` on a terminal, each timed from its input
// request to the follower reading its echo. For benchmarks of every route
// to an agent (direct, through the daemon).
func TerminalEcho(ctx context.Context, c *client.Client, n int) ([]time.Duration, error) {
	s, err := c.StartSession(ctx, wire.SessionRequest{Command: "cat", TTY: true})
	if err != nil {
		return nil, err
	}
	defer func() {
		_, _ = c.KillSession(context.Background(), s.ID, "KILL", 0)
		_ = c.ForgetSession(context.Background(), s.ID)
	}()
	seen := make(chan string, 64)
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		_, _, _ = c.SessionOutput(fctx, s.ID, 0, true, func(_ string, _ int64, d []byte) error {
			seen <- string(d)
			return nil
		})
	}()
	lat := make([]time.Duration, 0, n)
	for i := range n {
		key := string(rune('a' + i%26))
		start := time.Now()
		if err := c.SessionInput(ctx, s.ID, []byte(key)); err != nil {
			return nil, err
		}
		for got := ""; !strings.Contains(got, key); {
			select {
			case d := <-seen:
				got += d
			case <-time.After(10 * time.Second):
				return nil, fmt.Errorf("keystroke %q never echoed", key)
			}
		}
		lat = append(lat, time.Since(start))
	}
	return lat, nil
}

// TCPRequest is one request to a counting server (one that answers each
// connection with the count of bytes it read, once the client half-closed)
// over a connection dial opens: for benchmarks of every route to a port.
func TCPRequest(dial func() (net.Conn, error)) error {
	conn, err := dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("x")); err != nil {
		return err
	}
	if err := conn.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		return err
	}
	if got, _ := io.ReadAll(conn); string(got) != "1" {
		return fmt.Errorf("the counting server answered %q, want 1", got)
	}
	return nil
}

// TCPStream sends size bytes to a counting server over a connection dial
// opens and checks its count.
func TCPStream(dial func() (net.Conn, error), size int) error {
	conn, err := dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	buf := make([]byte, 256<<10)
	for sent := 0; sent < size; sent += len(buf) {
		if _, err := conn.Write(buf[:min(len(buf), size-sent)]); err != nil {
			return err
		}
	}
	if err := conn.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		return err
	}
	if got, _ := io.ReadAll(conn); string(got) != strconv.Itoa(size) {
		return fmt.Errorf("the counting server answered %q, want %d", got, size)
	}
	return nil
}
