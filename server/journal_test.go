package server

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/server/api"
)

func testRecord(id string, state string) *record {
	return &record{Sandbox: api.Sandbox{ID: id, Tenant: "t", State: state, CreatedAt: time.Unix(1, 0).UTC()}}
}

// journalOnly writes recs into dir's journal as a daemon that died before
// their bbolt commit would have left them.
func journalOnly(t *testing.T, dir string, recs ...*record) *journal {
	t.Helper()
	j, _, err := openJournal(filepath.Join(dir, "journal"))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		body, _ := json.Marshal(r)
		if err := j.append(journaled{id: r.ID, body: body}); err != nil {
			t.Fatal(err)
		}
	}
	return j
}

func states(t *testing.T, st *store) map[string]string {
	t.Helper()
	recs, err := st.sandboxes()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, r := range recs {
		out[r.ID] = r.State
	}
	return out
}

// TestJournalRecovery: records that reached only the journal are in the
// registry after a restart; a journal entry never overwrites a later state
// bbolt holds; a torn last entry is dropped, the ones before it kept.
func TestJournalRecovery(t *testing.T) {
	dir := t.TempDir()
	st, err := openStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	old := testRecord("sb-old", api.StateRunning)
	if err := st.addSandbox(old); err != nil {
		t.Fatal(err)
	}
	old.State = api.StateDestroyed
	if err := st.putSandbox(old); err != nil {
		t.Fatal(err)
	}
	if err := st.close(); err != nil {
		t.Fatal(err)
	}

	j := journalOnly(t, dir, testRecord("sb-old", api.StateRunning), testRecord("sb-a", api.StateRunning), testRecord("sb-b", api.StateRunning))
	end := j.off
	j.close()
	// Tear the last entry: its final byte never reached the disk.
	f, err := os.OpenFile(filepath.Join(dir, "journal"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0}, end-1); err != nil {
		t.Fatal(err)
	}
	f.Close()

	st, err = openStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	got := states(t, st)
	want := map[string]string{"sb-old": api.StateDestroyed, "sb-a": api.StateRunning}
	if len(got) != len(want) || got["sb-old"] != want["sb-old"] || got["sb-a"] != want["sb-a"] {
		t.Errorf("got %v, want %v", got, want)
	}
	// The journal was applied and emptied: a second restart changes nothing.
	if err := st.addSandbox(testRecord("sb-a", api.StateRunning)); !errors.Is(err, errIDReused) {
		t.Errorf("re-adding a recovered id: %v", err)
	}
}

// TestJournalStale: entries left in the journal from before it was last
// emptied are not replayed, even where one lines up with an entry boundary.
func TestJournalStale(t *testing.T) {
	dir := t.TempDir()
	j := journalOnly(t, dir, testRecord("sb-1", api.StateRunning), testRecord("sb-2", api.StateRunning))
	if err := j.reset(); err != nil {
		t.Fatal(err)
	}
	// Same length as sb-1's entry, so sb-2's stale entry follows it exactly.
	r := testRecord("sb-3", api.StateRunning)
	body, _ := json.Marshal(r)
	if err := j.append(journaled{id: r.ID, body: body}); err != nil {
		t.Fatal(err)
	}
	j.close()
	j, recs, err := openJournal(filepath.Join(dir, "journal"))
	if err != nil {
		t.Fatal(err)
	}
	j.close()
	if len(recs) != 1 || recs[0].id != "sb-3" {
		ids := []string{}
		for _, r := range recs {
			ids = append(ids, r.id)
		}
		t.Errorf("replayed %v, want [sb-3]", ids)
	}
}

// TestJournalPath: a record added through the journal is visible to every
// read at once, its id cannot be issued again before or after it reaches
// bbolt, and a record too large for the journal goes to bbolt directly.
func TestJournalPath(t *testing.T) {
	st, err := openStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	if err := st.addSandbox(testRecord("sb-x", api.StateRunning)); err != nil {
		t.Fatal(err)
	}
	if err := st.addSandbox(testRecord("sb-x", api.StateRunning)); !errors.Is(err, errIDReused) {
		t.Errorf("second add while pending: %v", err)
	}
	if r, err := st.sandbox("sb-x"); err != nil || r == nil {
		t.Fatalf("read after add: %v %v", r, err)
	}
	if err := st.addSandbox(testRecord("sb-x", api.StateRunning)); !errors.Is(err, errIDReused) {
		t.Errorf("second add after commit: %v", err)
	}
	big := testRecord("sb-big", api.StateRunning)
	big.Labels = map[string]string{"x": strings.Repeat("y", journalSize)}
	if err := st.addSandbox(big); err != nil {
		t.Fatal(err)
	}
	if got := states(t, st); len(got) != 2 {
		t.Errorf("got %v", got)
	}
}
