//go:build linux

package agent_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/agent/client"
	"github.com/cordon-sandbox/cordon/agent/wire"
	"github.com/cordon-sandbox/cordon/internal/testutil"
	"github.com/cordon-sandbox/cordon/sandbox/sandboxtest/conformance"
)

// BenchmarkAgents measures cordon-agent and the reference worker side by
// side, in one process: both over TCP loopback (the reference's only
// transport), and cordon-agent over its unix socket too.
func BenchmarkAgents(b *testing.B) {
	settings := conformance.Settings{"MAX_BODY_BYTES": strconv.Itoa(128 << 20)}
	agents := []struct {
		name  string
		start func(b *testing.B) (*conformance.Target, *proc)
		rss   func(p *proc) int64
	}{
		{"cordon-unix", func(b *testing.B) (*conformance.Target, *proc) { return startCordon(b, settings, false) }, selfRSS},
		{"cordon-tcp", func(b *testing.B) (*conformance.Target, *proc) { return startCordon(b, settings, true) }, selfRSS},
		{"reference-tcp", func(b *testing.B) (*conformance.Target, *proc) { return startRef(b, settings) }, childRSS},
	}
	for _, a := range agents {
		b.Run(a.name, func(b *testing.B) {
			tg, p := a.start(b)
			c := client.New(tg.Endpoint)
			defer c.Close()
			b.Run("IdleRSS", func(b *testing.B) {
				// One exec and one file round trip first, so the figure is
				// of a warmed-up, idle agent.
				execTrue(b, c)
				for b.Loop() {
					time.Sleep(100 * time.Millisecond)
				}
				b.ReportMetric(float64(a.rss(p))/(1<<20), "idle-RSS-MiB")
			})
			b.Run("ExecTrue", func(b *testing.B) {
				var lat []time.Duration
				for b.Loop() {
					start := time.Now()
					execTrue(b, c)
					lat = append(lat, time.Since(start))
				}
				testutil.ReportPercentiles(b, "", lat)
			})
			for _, raw := range []bool{false, true} {
				name := "Output16MiB"
				if raw {
					name += "Raw"
				}
				b.Run(name, func(b *testing.B) {
					// Output streamed through the wire: the agent's reading
					// of the pipes; as text, or (Raw, as cordon run asks
					// for it) as base64 of the exact bytes.
					if raw && !c.HasFeature(b.Context(), "output-base64") {
						b.Skip("text output only")
					}
					for b.Loop() {
						res, err := c.Exec(b.Context(), "sh", client.ExecOptions{Args: []string{"-c", "yes abcdefghijklmnopqrstuvwxyz0123456789 | head -c 16777216"}, Stdout: io.Discard, RawOutput: raw})
						if err != nil || res.ExitCode != 0 {
							b.Fatalf("%+v %v", res, err)
						}
					}
					b.SetBytes(16 << 20)
				})
			}
			b.Run("Stdin4MiB", func(b *testing.B) {
				// The most cordon run -i passes, as text and (where the
				// agent takes it) as bytes that are not UTF-8, sent base64.
				text := strings.Repeat("abcdefghijklmnopqrstuvwxyz0123456789\n", 4<<20/37)
				bin := strings.Repeat("\xff\x00abcdefghijklmnopqrstuvwxyz012345678\n", 4<<20/40)
				for _, in := range []struct{ name, data string }{{"Text", text}, {"Binary", bin}} {
					b.Run(in.name, func(b *testing.B) {
						if in.name == "Binary" && !c.HasFeature(b.Context(), "stdin-base64") {
							b.Skip("text stdin only")
						}
						for b.Loop() {
							res, err := c.Exec(b.Context(), "wc", client.ExecOptions{Args: []string{"-c"}, Stdin: &in.data, Stdout: io.Discard})
							if err != nil || res.ExitCode != 0 {
								b.Fatalf("%+v %v", res, err)
							}
						}
						b.SetBytes(int64(len(in.data)))
					})
				}
			})
			b.Run("ExecParallel", func(b *testing.B) {
				var n atomic.Int64
				start := time.Now()
				b.SetParallelism(4)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						execTrue(b, c)
						n.Add(1)
					}
				})
				b.ReportMetric(float64(n.Load())/time.Since(start).Seconds(), "execs/s")
			})
			b.Run("File64MiB", func(b *testing.B) {
				data := make([]byte, 64<<20)
				rand.Read(data)
				ctx := context.Background()
				for b.Loop() {
					if err := c.WriteFile(ctx, "big.bin", data); err != nil {
						b.Fatal(err)
					}
					got, err := c.ReadFile(ctx, "big.bin")
					if err != nil || !bytes.Equal(got, data) {
						b.Fatalf("round trip: %v", err)
					}
				}
				b.SetBytes(2 * int64(len(data)))
				b.ReportMetric(float64(a.rss(p))/(1<<20), "RSS-after-MiB")
			})
			b.Run("File64MiBRaw", func(b *testing.B) {
				if !c.HasFeature(context.Background(), "raw-files") {
					b.Skip("no raw file routes")
				}
				data := make([]byte, 64<<20)
				rand.Read(data)
				ctx := context.Background()
				for b.Loop() {
					if err := c.Upload(ctx, "big.bin", bytes.NewReader(data), int64(len(data))); err != nil {
						b.Fatal(err)
					}
					var got bytes.Buffer
					if _, err := c.Download(ctx, "big.bin", 0, 0, &got); err != nil || !bytes.Equal(got.Bytes(), data) {
						b.Fatalf("round trip: %v", err)
					}
				}
				b.SetBytes(2 * int64(len(data)))
				b.ReportMetric(float64(a.rss(p))/(1<<20), "RSS-after-MiB")
			})
		})
	}
}

func execTrue(b *testing.B, c *client.Client) {
	var result *wire.Result
	err := c.Execute(context.Background(), wire.ExecuteRequest{Command: "true"}, func(ev wire.Event) error {
		if ev.Type == wire.EventResult {
			result = ev.Result
		}
		return nil
	})
	if err != nil || result == nil || result.ExitCode != 0 {
		b.Fatalf("exec true: %v %+v", err, result)
	}
}

func rss(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return kb << 10
		}
	}
	return 0
}

func selfRSS(p *proc) int64 { return rss(p.cmd.Process.Pid) }

// childRSS is the RSS of the process under tini (node itself).
func childRSS(p *proc) int64 {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(p.cmd.Process.Pid) + "/task/" + strconv.Itoa(p.cmd.Process.Pid) + "/children")
	var total int64
	for _, f := range strings.Fields(string(b)) {
		pid, _ := strconv.Atoi(f)
		total += rss(pid)
	}
	return total
}

// BenchmarkSpawnFloor is the machine's own cost of fork, exec and wait of
// /bin/true, without any agent: the floor under every ExecTrue figure.
func BenchmarkSpawnFloor(b *testing.B) {
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		pid, err := syscall.ForkExec("/bin/true", []string{"true"}, &syscall.ProcAttr{Sys: &syscall.SysProcAttr{Setpgid: true}})
		if err != nil {
			b.Fatal(err)
		}
		var ws syscall.WaitStatus
		if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	testutil.ReportPercentiles(b, "", lat)
}

// BenchmarkSessions: starting a detached program and reading its whole
// output back once it exited (start → wait → output), and the throughput
// of following a session that writes as fast as it can.
func BenchmarkSessions(b *testing.B) {
	tg, _ := startCordon(b, conformance.Settings{}, false)
	c := client.New(tg.Endpoint)
	defer c.Close()
	ctx := context.Background()
	b.Run("StartWaitRead", func(b *testing.B) {
		var lat []time.Duration
		for b.Loop() {
			start := time.Now()
			s, err := c.StartSession(ctx, wire.SessionRequest{Command: "echo", Args: []string{"hi"}})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := c.WaitSession(ctx, s.ID, 10*time.Second); err != nil {
				b.Fatal(err)
			}
			var got []byte
			if _, _, err := c.SessionOutput(ctx, s.ID, 0, true, func(_ string, _ int64, d []byte) error { got = append(got, d...); return nil }); err != nil || string(got) != "hi\n" {
				b.Fatalf("%q %v", got, err)
			}
			lat = append(lat, time.Since(start))
			if err := c.ForgetSession(ctx, s.ID); err != nil {
				b.Fatal(err)
			}
		}
		testutil.ReportPercentiles(b, "", lat)
	})
	// From a session's start with a 1 ms timeout to its wait answering
	// that the timeout ended it (the stop of sleep by TERM, confirmed).
	b.Run("TimeoutStop", func(b *testing.B) {
		var lat []time.Duration
		for b.Loop() {
			start := time.Now()
			s, err := c.StartSession(ctx, wire.SessionRequest{Command: "sleep", Args: []string{"60"}, TimeoutMs: 1})
			if err != nil {
				b.Fatal(err)
			}
			w, err := c.WaitSession(ctx, s.ID, 10*time.Second)
			if err != nil || !w.TimedOut {
				b.Fatalf("%+v %v", w, err)
			}
			lat = append(lat, time.Since(start))
			if err := c.ForgetSession(ctx, s.ID); err != nil {
				b.Fatal(err)
			}
		}
		testutil.ReportPercentiles(b, "", lat)
	})
	b.Run("Follow", func(b *testing.B) {
		const size = 256 << 20
		s, err := c.StartSession(ctx, wire.SessionRequest{Command: "head", Args: []string{"-c", strconv.Itoa(size), "/dev/zero"}, RetainBytes: wire.MaxRetainBytes})
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		var n int64
		from := int64(0)
		for {
			next, done, err := c.SessionOutput(ctx, s.ID, from, true, func(_ string, _ int64, d []byte) error { n += int64(len(d)); return nil })
			var ev *client.EvictedError
			if errors.As(err, &ev) {
				from = ev.First // a follower slower than the writer loses what it lagged
				continue
			}
			if err != nil {
				b.Fatal(err)
			}
			if done {
				break
			}
			from = next
		}
		b.ReportMetric(float64(n)/time.Since(start).Seconds()/1e6, "followed-MB/s")
		b.ReportMetric(float64(n)/size*100, "followed-%")
		_ = c.ForgetSession(ctx, s.ID)
	})
}

// BenchmarkStreamedStdin: input streamed to a command (stdio mode, chunk
// by chunk to its end) against the same input in the request body.
func BenchmarkStreamedStdin(b *testing.B) {
	tg, _ := startCordon(b, conformance.Settings{"MAX_BODY_BYTES": strconv.Itoa(128 << 20)}, false)
	c := client.New(tg.Endpoint)
	defer c.Close()
	ctx := context.Background()
	const size = 64 << 20
	data := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	for _, how := range []string{"streamed", "body"} {
		b.Run(how, func(b *testing.B) {
			b.SetBytes(size)
			for b.Loop() {
				o := client.ExecOptions{Args: []string{"-c"}}
				if how == "streamed" {
					o.StdinStream = bytes.NewReader(data)
				} else {
					s := string(data)
					o.Stdin = &s
				}
				var out bytes.Buffer
				o.Stdout = &out
				if res, err := c.Exec(ctx, "wc", o); err != nil || res.ExitCode != 0 || strings.TrimSpace(out.String()) != strconv.Itoa(size) {
					b.Fatalf("%+v %v %q", res, err, out.String())
				}
			}
		})
	}
}

// BenchmarkTerminalEcho: a keystroke typed into a terminal session and its
// echo read back, straight to the agent on its unix socket.
func BenchmarkTerminalEcho(b *testing.B) {
	tg, _ := startCordon(b, conformance.Settings{}, false)
	c := client.New(tg.Endpoint)
	defer c.Close()
	lat, err := conformance.TerminalEcho(context.Background(), c, b.N)
	if err != nil {
		b.Fatal(err)
	}
	testutil.ReportPercentiles(b, "", lat)
}

// BenchmarkTCPConnect: a stream to a port through the agent's tcp-connect
// against a direct loopback connection: a new connection and one round
// trip (the latency a forwarded request adds), and one stream's throughput.
func BenchmarkTCPConnect(b *testing.B) {
	tg, _ := startCordon(b, conformance.Settings{}, false)
	c := client.New(tg.Endpoint)
	defer c.Close()
	ctx := context.Background()
	// A loopback server: echoes a byte per connection, or sinks a stream
	// and answers its length once the writer half-closed.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				n, _ := io.Copy(io.Discard, conn)
				fmt.Fprint(conn, n)
			}()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	dials := map[string]func() (net.Conn, error){
		"direct":      func() (net.Conn, error) { return net.Dial("tcp", ln.Addr().String()) },
		"tcp-connect": func() (net.Conn, error) { return c.DialTCP(ctx, port) },
	}
	for _, name := range []string{"direct", "tcp-connect"} {
		dial := dials[name]
		b.Run(name+"/Request", func(b *testing.B) {
			var lat []time.Duration
			for b.Loop() {
				start := time.Now()
				if err := conformance.TCPRequest(dial); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			testutil.ReportPercentiles(b, "", lat)
		})
		b.Run(name+"/Stream", func(b *testing.B) {
			const size = 512 << 20
			b.SetBytes(size)
			for b.Loop() {
				if err := conformance.TCPStream(dial, size); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
