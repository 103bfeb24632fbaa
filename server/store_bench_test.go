package server

import (
	"fmt"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/server/api"
	bolt "go.etcd.io/bbolt"
)

// BenchmarkAddSandbox: making a new sandbox's record durable, through the
// journal (what a create waits for) and, for comparison, as one bbolt
// transaction (what it waited for before).
func BenchmarkAddSandbox(b *testing.B) {
	st, err := openStore(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer st.close()
	n := 0
	rec := func() *record {
		n++
		return &record{Sandbox: api.Sandbox{ID: fmt.Sprintf("sb-%016x", n), Tenant: "t", State: api.StateRunning, CreatedAt: time.Now()}}
	}
	b.Run("Journal", func(b *testing.B) {
		for b.Loop() {
			if err := st.addSandbox(rec()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Bolt", func(b *testing.B) {
		for b.Loop() {
			r := rec()
			if err := st.db.Update(func(tx *bolt.Tx) error {
				if err := tx.Bucket(bucketIDs).Put([]byte(r.ID), []byte("x")); err != nil {
					return err
				}
				return put(tx, bucketSandboxes, r.ID, r)
			}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
