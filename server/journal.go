package server

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"hash/crc32"
	"io"
	"os"
	"sync"
)

// A new sandbox's record must be on disk before its create is answered:
// a daemon that restarts tears down every sandbox it has no record of. A
// bbolt commit syncs twice (its pages, then its meta page), 1.2–1.7 ms
// here, most of a pool claim. The journal makes the record durable with one
// write and one fdatasync into blocks written once when the file was made
// (0.2–0.3 ms: no size, allocation or extent change for the file system to
// journal), and the record reaches
// bbolt in the background; a daemon that starts applies what the journal
// holds and bbolt lacks. Every other registry operation first waits for the
// records ahead of it to reach bbolt.
//
// An entry is [length uint32][crc32 uint32][seq uint64][record JSON]; seq
// grows by one per entry, so replay stops at the first entry that is torn,
// zeroed, or left from before the journal was last emptied.

const (
	journalSize   = 1 << 20
	journalHeader = 16
)

type journal struct {
	mu   sync.Mutex
	f    *os.File
	off  int64  // where the next entry goes
	seq  uint64 // the next entry's
	size int64
}

// journaled is one record as the journal holds it.
type journaled struct {
	id   string
	body []byte // the record's JSON, as bbolt stores it
}

// openJournal opens (creating and preallocating) the journal at path and
// returns the records it holds.
func openJournal(path string) (*journal, []journaled, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, err
	}
	j := &journal{f: f, size: journalSize}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if st.Size() < journalSize {
		// Zeros written, not fallocated: an overwrite of an allocated,
		// written block changes no metadata, so its fdatasync flushes the
		// data alone (a fallocated block must first be marked written).
		if _, err := f.WriteAt(make([]byte, journalSize-st.Size()), st.Size()); err != nil {
			f.Close()
			return nil, nil, err
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return nil, nil, err
		}
	}
	recs, seq, err := j.replay()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	j.seq = seq
	return j, recs, nil
}

func (j *journal) replay() ([]journaled, uint64, error) {
	buf := make([]byte, j.size)
	if _, err := j.f.ReadAt(buf, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, 0, err
	}
	var out []journaled
	var seq uint64
	for off := 0; off+journalHeader <= len(buf); {
		n := int(binary.LittleEndian.Uint32(buf[off:]))
		sum := binary.LittleEndian.Uint32(buf[off+4:])
		s := binary.LittleEndian.Uint64(buf[off+8:])
		end := off + journalHeader + n
		if n == 0 || end > len(buf) || crc32.ChecksumIEEE(buf[off+8:end]) != sum || (len(out) > 0 && s != seq+1) {
			break
		}
		var r record
		body := buf[off+journalHeader : end]
		if err := json.Unmarshal(body, &r); err != nil || r.ID == "" {
			break
		}
		out, seq, off = append(out, journaled{id: r.ID, body: body}), s, end
	}
	return out, seq + 1, nil
}

// errJournalFull: the record does not fit; it goes to bbolt directly.
var errJournalFull = errors.New("journal full")

// append makes r durable.
func (j *journal) append(r journaled) error {
	body := r.body
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.off+journalHeader+int64(len(body)) > j.size {
		return errJournalFull
	}
	e := make([]byte, journalHeader+len(body))
	binary.LittleEndian.PutUint32(e, uint32(len(body)))
	binary.LittleEndian.PutUint64(e[8:], j.seq)
	copy(e[journalHeader:], body)
	binary.LittleEndian.PutUint32(e[4:], crc32.ChecksumIEEE(e[8:]))
	if _, err := j.f.WriteAt(e, j.off); err != nil {
		return err
	}
	if err := datasync(j.f); err != nil {
		return err
	}
	j.off += int64(len(e))
	j.seq++
	return nil
}

// reset empties the journal once everything in it is in bbolt. Its first
// header is zeroed; it need not be synced, since replaying entries bbolt
// already holds changes nothing.
func (j *journal) reset() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.off == 0 {
		return nil
	}
	_, err := j.f.WriteAt(make([]byte, journalHeader), 0)
	j.off = 0
	return err
}

func (j *journal) close() error { return j.f.Close() }
