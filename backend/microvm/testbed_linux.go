package microvm

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cordon-sandbox/cordon/agent/vminit"
	"github.com/cordon-sandbox/cordon/baseline"
)

// RunInGuest boots a guest (cold, as root, no agent) that runs argv with
// env, with files (a name under vminit.ExtraDir → a host file) and a
// cgroup v2 hierarchy whose controllers are delegated, writes its output
// to out, and returns its exit status: a test bed for code that must run
// on cgroup v2 where the host has v1.
func (b *Backend) RunInGuest(ctx context.Context, files map[string]string, argv, env []string, mem int64, out io.Writer) (int, error) {
	if b.probe(); b.probeErr != nil {
		return 0, b.probeErr
	}
	var extra []initramfsFile
	for name, src := range files {
		extra = append(extra, initramfsFile{Name: name, Mode: 0o755, Src: src})
	}
	slices.SortFunc(extra, func(a, b initramfsFile) int { return strings.Compare(a.Name, b.Name) })
	// Built for this run (boot finds it), and removed after.
	initrd, err := b.initramfs(extra...)
	if err != nil {
		return 0, err
	}
	defer os.Remove(initrd)
	vm, err := b.boot(ctx, bootOptions{accel: b.accel, mem: mem, probing: true, extra: extra})
	if err != nil {
		return 0, err
	}
	defer vm.kill()
	var seed [32]byte
	_, _ = rand.Read(seed[:])
	line, err := json.Marshal(vminit.Config{Token: "test-run", UID: baseline.DefaultUID, Seed: seed[:], TimeNs: time.Now().UnixNano(), Run: argv, RunEnv: env})
	if err != nil {
		return 0, err
	}
	if _, err := vm.port.Write(append(line, '\n')); err != nil {
		return 0, err
	}
	// The output, up to the marker and the status.
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			vm.port.Close()
		case <-done:
		}
	}()
	defer close(done)
	var tail []byte
	buf := make([]byte, 32<<10)
	for {
		n, err := vm.port.Read(buf)
		tail = append(tail, buf[:n]...)
		if i := strings.Index(string(tail), vminit.ExitMarker); i >= 0 {
			if j := strings.IndexByte(string(tail[i+len(vminit.ExitMarker):]), '\n'); j >= 0 {
				out.Write(tail[:i])
				code, perr := strconv.Atoi(string(tail[i+len(vminit.ExitMarker) : i+len(vminit.ExitMarker)+j]))
				if perr != nil {
					return 0, fmt.Errorf("the guest's exit status: %v", perr)
				}
				return code, nil
			}
		} else if len(tail) > len(vminit.ExitMarker) {
			keep := len(vminit.ExitMarker)
			out.Write(tail[:len(tail)-keep])
			tail = append(tail[:0], tail[len(tail)-keep:]...)
		}
		if err != nil {
			out.Write(tail)
			return 0, fmt.Errorf("the guest ended without its status: %v; %s", err, lastLines(vm.Diagnostics(), 8))
		}
	}
}
