package main_test

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/server/api"
	sclient "github.com/cordon-sandbox/cordon/server/client"
)

// BenchmarkTerminalEchoCLI: a key typed on the user's terminal into `cat`
// on a sandbox's terminal until its echo shows on the user's terminal,
// through the command a user types: `cordon exec -it` (through a local
// daemon), `cordon run -it` (no daemon), and, for comparison,
// `docker exec -it` into a running container (set CORDON_BENCH_DOCKER to
// the container's id, and DOCKER_HOST as the docker CLI wants it;
// scripts/bench-peers does both). The echo is the sandbox terminal's own:
// the user's terminal is raw, as each CLI sets it.
func BenchmarkTerminalEchoCLI(b *testing.B) {
	testutil.RequiresRoot(b)
	cli := buildCLI(b)
	b.Run("cordon-exec-it", func(b *testing.B) {
		_, sock, d := serveInTemp(b)
		defer d.stop(b, sock)
		c, err := sclient.New("unix://"+sock, "")
		if err != nil {
			b.Fatal(err)
		}
		sb, err := c.Create(b.Context(), api.CreateRequest{})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Delete(b.Context(), sb.ID)
		benchEcho(b, exec.Command(cli, "exec", "-it", "--host=unix://"+sock, sb.ID, "--", "cat"))
	})
	b.Run("cordon-run-it", func(b *testing.B) {
		benchEcho(b, exec.Command(cli, "run", "-it", "--", "cat"))
	})
	b.Run("docker-exec-it", func(b *testing.B) {
		id := os.Getenv("CORDON_BENCH_DOCKER")
		if id == "" {
			b.Skip("CORDON_BENCH_DOCKER is not set (scripts/bench-peers sets it)")
		}
		benchEcho(b, exec.Command(testutil.Requires(b, "docker")[0], "exec", "-it", id, "cat"))
	})
}

// benchEcho runs cmd on a terminal of its own and times each key typed
// until its echo comes back.
func benchEcho(b *testing.B, cmd *exec.Cmd) {
	cmd.Env = append(cmd.Environ(), "TERM=xterm")
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 24, Cols: 80})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		tty.Close()
	}()
	chunks := make(chan []byte, 64)
	go func() {
		defer close(chunks)
		for {
			buf := make([]byte, 4096)
			n, err := tty.Read(buf)
			if n > 0 {
				chunks <- buf[:n]
			}
			if err != nil {
				return
			}
		}
	}()
	// until reads until want shows n times, or fails past a generous
	// deadline.
	until := func(want string, n int) {
		var seen []byte
		deadline := time.After(30 * time.Second)
		for bytes.Count(seen, []byte(want)) < n {
			select {
			case c, ok := <-chunks:
				if !ok {
					b.Fatalf("the terminal closed before %q showed: %q", want, seen)
				}
				seen = append(seen, c...)
			case <-deadline:
				b.Fatalf("%q never showed: %q", want, seen)
			}
		}
	}
	// The program is up once a line typed comes back from it.
	for ready := false; !ready; {
		if _, err := io.WriteString(tty, "ready\r"); err != nil {
			b.Fatal(err)
		}
		select {
		case c := <-chunks:
			ready = bytes.Count(c, []byte("ready")) > 0
		case <-time.After(30 * time.Second):
			b.Fatal("the program never answered")
		}
	}
	time.Sleep(200 * time.Millisecond)
	for len(chunks) > 0 {
		<-chunks
	}
	var lat []time.Duration
	i := 0
	for b.Loop() {
		key := string(rune('a' + i%26))
		i++
		start := time.Now()
		if _, err := io.WriteString(tty, key); err != nil {
			b.Fatal(err)
		}
		until(key, 1)
		lat = append(lat, time.Since(start))
		if i%40 == 0 { // end the line, untimed: its echo, then cat's copy
			b.StopTimer()
			_, _ = io.WriteString(tty, "\r")
			until("\n", 2)
			b.StartTimer()
		}
	}
	testutil.ReportPercentiles(b, "", lat)
}

// BenchmarkTerminalEchoEnvd: E2B's envd, the agent in each of its
// sandboxes, asked the way its SDK asks (Connect, JSON here): a key sent
// to `cat` on a PTY with SendInput until the key's echo arrives on the
// Start stream. Set CORDON_BENCH_ENVD to envd's URL (scripts/bench-peers
// starts one); cordon's agent is measured the same way by
// BenchmarkTerminalEcho in ./agent.
func BenchmarkTerminalEchoEnvd(b *testing.B) {
	base := os.Getenv("CORDON_BENCH_ENVD")
	if base == "" {
		b.Skip("CORDON_BENCH_ENVD is not set (scripts/bench-peers sets it)")
	}
	hc := &http.Client{}
	body, _ := json.Marshal(map[string]any{
		"process": map[string]any{"cmd": "cat"},
		"pty":     map[string]any{"size": map[string]any{"cols": 80, "rows": 24}},
	})
	frame := make([]byte, 5, 5+len(body))
	binary.BigEndian.PutUint32(frame[1:], uint32(len(body)))
	req, _ := http.NewRequestWithContext(b.Context(), http.MethodPost, base+"/process.Process/Start", bytes.NewReader(append(frame, body...)))
	req.Header.Set("Content-Type", "application/connect+json")
	req.SetBasicAuth("root", "")
	resp, err := hc.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		b.Fatalf("Start: %s %s", resp.Status, msg)
	}
	br := bufio.NewReader(resp.Body)
	// next is the Start stream's next event.
	type event struct {
		Event struct {
			Start *struct {
				Pid uint32 `json:"pid"`
			} `json:"start"`
			Data *struct {
				Pty []byte `json:"pty"`
			} `json:"data"`
			End *json.RawMessage `json:"end"`
		} `json:"event"`
	}
	next := func() event {
		var head [5]byte
		if _, err := io.ReadFull(br, head[:]); err != nil {
			b.Fatal(err)
		}
		msg := make([]byte, binary.BigEndian.Uint32(head[1:]))
		if _, err := io.ReadFull(br, msg); err != nil {
			b.Fatal(err)
		}
		if head[0]&2 != 0 {
			b.Fatalf("the stream ended: %s", msg)
		}
		var ev event
		if err := json.Unmarshal(msg, &ev); err != nil {
			b.Fatal(err)
		}
		return ev
	}
	var pid uint32
	for pid == 0 {
		if ev := next(); ev.Event.Start != nil {
			pid = ev.Event.Start.Pid
		}
	}
	send := func(key string) {
		in, _ := json.Marshal(map[string]any{
			"process": map[string]any{"pid": pid},
			"input":   map[string]any{"pty": base64.StdEncoding.EncodeToString([]byte(key))},
		})
		req, _ := http.NewRequestWithContext(b.Context(), http.MethodPost, base+"/process.Process/SendInput", bytes.NewReader(in))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Connect-Protocol-Version", "1")
		req.SetBasicAuth("root", "")
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("SendInput: %s %s", resp.Status, msg)
		}
	}
	until := func(want string, n int) {
		for seen := ""; strings.Count(seen, want) < n; {
			if ev := next(); ev.Event.Data != nil {
				seen += string(ev.Event.Data.Pty)
			} else if ev.Event.End != nil {
				b.Fatalf("cat ended: %s", *ev.Event.End)
			}
		}
	}
	defer func() {
		sig, _ := json.Marshal(map[string]any{"process": map[string]any{"pid": pid}, "signal": "SIGNAL_SIGKILL"})
		req, _ := http.NewRequest(http.MethodPost, base+"/process.Process/SendSignal", bytes.NewReader(sig))
		req.Header.Set("Content-Type", "application/json")
		req.SetBasicAuth("root", "")
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	var lat []time.Duration
	i := 0
	for b.Loop() {
		key := string(rune('a' + i%26))
		i++
		start := time.Now()
		send(key)
		until(key, 1)
		lat = append(lat, time.Since(start))
		if i%40 == 0 { // end the line, untimed: its echo, then cat's copy
			b.StopTimer()
			send("\r")
			until("\n", 2)
			b.StartTimer()
		}
	}
	testutil.ReportPercentiles(b, "", lat)
}
