package microvm

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// initramfsFile is a file of the guest's initramfs.
type initramfsFile struct {
	Name string // without a leading slash
	Mode uint32 // permission bits
	Src  string // the host file it holds; "" for a directory
}

// writeInitramfs writes files as a newc cpio archive (the kernel's
// initramfs format): directories first, then each file's bytes.
func writeInitramfs(w io.Writer, files []initramfsFile) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	ino := 1
	header := func(name string, mode uint32, size int64) error {
		n := len(name) + 1
		if _, err := fmt.Fprintf(bw, "070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%s\x00",
			ino, mode, 0, 0, 1, 0, size, 0, 0, 0, 0, n, 0, name); err != nil {
			return err
		}
		ino++
		return pad(bw, 110+n)
	}
	for _, f := range files {
		name := strings.TrimPrefix(filepath.Clean("/"+f.Name), "/")
		if f.Src == "" {
			if err := header(name, 0o040000|f.Mode, 0); err != nil {
				return err
			}
			continue
		}
		src, err := os.Open(f.Src)
		if err != nil {
			return err
		}
		st, err := src.Stat()
		if err == nil {
			err = header(name, 0o100000|f.Mode, st.Size())
		}
		if err == nil {
			var n int64
			if n, err = io.Copy(bw, src); err == nil && n != st.Size() {
				err = fmt.Errorf("%s changed while it was read", f.Src)
			}
		}
		src.Close()
		if err == nil {
			err = pad(bw, int(st.Size()))
		}
		if err != nil {
			return err
		}
	}
	if err := header("TRAILER!!!", 0, 0); err != nil {
		return err
	}
	return bw.Flush()
}

// pad writes the zeros that align n bytes to 4.
func pad(w io.Writer, n int) error {
	_, err := w.Write(make([]byte, (4-n%4)%4))
	return err
}
