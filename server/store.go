package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/cordon-sandbox/cordon/internal/privdir"
	"github.com/cordon-sandbox/cordon/sandbox"
	"github.com/cordon-sandbox/cordon/server/api"
	bolt "go.etcd.io/bbolt"
)

// The registry lives in one bbolt file. bbolt is what containerd keeps its
// metadata in: pure Go (the daemon stays one static binary), one file,
// serializable read-write transactions with fsync on commit, and no server
// to run. The registry is small (records, keys, pools) and written at
// lifecycle changes only, which suits a B+tree with a single writer.

var (
	bucketSandboxes = []byte("sandboxes") // id → record (JSON)
	bucketIDs       = []byte("ids")       // every id ever issued, so none is reused
	bucketKeys      = []byte("keys")      // hex sha256 of the secret → key (JSON)
	bucketPools     = []byte("pools")     // name → pool (JSON)
	bucketSnapshots = []byte("snapshots") // id → snapshot (JSON)
	bucketTemplates = []byte("templates") // tenant/name → template (JSON)
)

// record is a sandbox's entry in the registry.
type record struct {
	api.Sandbox
	IdleTimeoutNs time.Duration `json:"idleTimeoutNs,omitempty"`
	Error         string        `json:"error,omitempty"` // the last failed teardown
	// Adoption is how a restarted daemon takes the sandbox back, agent
	// token included: the registry file is readable by its owner only.
	// It is dropped once the sandbox is destroyed.
	Adoption *sandbox.Adoption `json:"adoption,omitempty"`
}

type store struct {
	db *bolt.DB
	j  *journal

	mu      sync.Mutex
	flushed *sync.Cond  // signalled after each background commit
	pending []journaled // durable in the journal, not yet in bbolt
	err     error       // the last background commit's failure
	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}
}

func openStore(dir string) (*store, error) {
	// The registry holds every live sandbox's agent token: a directory
	// another user could change is refused.
	if err := privdir.Ensure(dir, 0o700); err != nil {
		return nil, fmt.Errorf("registry directory: %w", err)
	}
	db, err := bolt.Open(filepath.Join(dir, "cordon.db"), 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("the registry %s is locked: is another cordon serve using this state directory?", filepath.Join(dir, "cordon.db"))
		}
		return nil, err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketSandboxes, bucketIDs, bucketKeys, bucketPools, bucketSnapshots, bucketTemplates} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	j, recs, err := openJournal(filepath.Join(dir, "journal"))
	if err != nil {
		db.Close()
		return nil, err
	}
	s := &store{db: db, j: j, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	s.flushed = sync.NewCond(&s.mu)
	// What the last daemon journaled and had not yet committed.
	if err := s.commit(recs, false); err == nil {
		err = j.reset()
	}
	if err != nil {
		j.close()
		db.Close()
		return nil, err
	}
	go s.committer()
	return s, nil
}

func (s *store) close() error {
	err := s.sync()
	close(s.stop)
	<-s.done
	return errors.Join(err, s.j.close(), s.db.Close())
}

// commit puts records into bbolt, each with its id. An id there already is
// refused when the records are new (fresh); a journaled one is skipped,
// since bbolt then holds it, or a later state of it.
func (s *store) commit(recs []journaled, fresh bool) error {
	if len(recs) == 0 {
		return nil
	}
	issued := []byte(time.Now().UTC().Format(time.RFC3339Nano))
	return s.db.Update(func(tx *bolt.Tx) error {
		ids := tx.Bucket(bucketIDs)
		for _, r := range recs {
			if ids.Get([]byte(r.id)) != nil {
				if fresh {
					return fmt.Errorf("%w: %s", errIDReused, r.id)
				}
				continue
			}
			if err := ids.Put([]byte(r.id), issued); err != nil {
				return err
			}
			if err := tx.Bucket(bucketSandboxes).Put([]byte(r.id), r.body); err != nil {
				return err
			}
		}
		return nil
	})
}

// committer moves journaled records into bbolt, and empties the journal
// whenever nothing is left pending.
func (s *store) committer() {
	defer close(s.done)
	for {
		select {
		case <-s.wake:
		case <-s.stop:
			return
		}
		s.mu.Lock()
		batch := slices.Clone(s.pending)
		s.mu.Unlock()
		err := s.commit(batch, false)
		s.mu.Lock()
		if err == nil {
			s.pending = s.pending[len(batch):]
			if len(s.pending) == 0 {
				err = s.j.reset()
			} else {
				s.poke()
			}
		}
		s.err = err
		s.flushed.Broadcast()
		s.mu.Unlock()
		if err != nil {
			// The records are safe in the journal; try again shortly.
			time.AfterFunc(time.Second, func() {
				s.mu.Lock()
				s.poke()
				s.mu.Unlock()
			})
		}
	}
}

func (s *store) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// sync waits until every journaled record is in bbolt.
func (s *store) sync() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.pending) > 0 {
		if s.err != nil {
			return s.err
		}
		s.flushed.Wait()
	}
	return nil
}

func put(tx *bolt.Tx, bucket []byte, key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return tx.Bucket(bucket).Put([]byte(key), b)
}

// errIDReused: a sandbox id that was issued before.
var errIDReused = errors.New("sandbox id issued before")

// addSandbox records a new sandbox, claiming its id, durably (in the
// journal: one fdatasync); an id ever issued before is refused.
func (s *store) addSandbox(r *record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.pending {
		if p.id == r.ID {
			return fmt.Errorf("%w: %s", errIDReused, r.ID)
		}
	}
	issued := false
	if err := s.db.View(func(tx *bolt.Tx) error {
		issued = tx.Bucket(bucketIDs).Get([]byte(r.ID)) != nil
		return nil
	}); err != nil {
		return err
	}
	if issued {
		return fmt.Errorf("%w: %s", errIDReused, r.ID)
	}
	body, err := json.Marshal(r)
	if err != nil {
		return err
	}
	jr := journaled{id: r.ID, body: body}
	switch err := s.j.append(jr); {
	case err == nil:
		s.pending = append(s.pending, jr)
		s.poke()
		return nil
	case !errors.Is(err, errJournalFull):
		return err
	}
	// A full journal empties once the committer catches up; meanwhile the
	// record goes to bbolt directly, after those ahead of it.
	for len(s.pending) > 0 && s.err == nil {
		s.flushed.Wait()
	}
	return s.commit([]journaled{jr}, true)
}

func (s *store) putSandbox(r *record) error {
	if err := s.sync(); err != nil {
		return err
	}
	return s.db.Update(func(tx *bolt.Tx) error { return put(tx, bucketSandboxes, r.ID, r) })
}

// sandbox reads one record; nil if there is none.
func (s *store) sandbox(id string) (*record, error) {
	if err := s.sync(); err != nil {
		return nil, err
	}
	var r *record
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketSandboxes).Get([]byte(id))
		if v == nil {
			return nil
		}
		r = &record{}
		return json.Unmarshal(v, r)
	})
	return r, err
}

func (s *store) sandboxes() ([]*record, error) {
	if err := s.sync(); err != nil {
		return nil, err
	}
	var out []*record
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSandboxes).ForEach(func(_, v []byte) error {
			var r record
			if err := json.Unmarshal(v, &r); err != nil {
				return err
			}
			out = append(out, &r)
			return nil
		})
	})
	return out, err
}

// pruneDestroyed drops records of sandboxes destroyed before cutoff; their
// ids stay claimed.
func (s *store) pruneDestroyed(cutoff time.Time) error {
	if err := s.sync(); err != nil {
		return err
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSandboxes)
		var doomed [][]byte
		err := b.ForEach(func(k, v []byte) error {
			var r record
			if json.Unmarshal(v, &r) == nil && r.State == api.StateDestroyed && r.LastActivity.Before(cutoff) {
				doomed = append(doomed, append([]byte(nil), k...))
			}
			return nil
		})
		for _, k := range doomed {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return err
	})
}

type keyRecord struct {
	api.Key
	Hash string `json:"hash"`
}

func (s *store) putKey(k *keyRecord) error {
	return s.db.Update(func(tx *bolt.Tx) error { return put(tx, bucketKeys, k.Hash, k) })
}

func (s *store) keys() ([]*keyRecord, error) {
	var out []*keyRecord
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketKeys).ForEach(func(_, v []byte) error {
			var k keyRecord
			if err := json.Unmarshal(v, &k); err != nil {
				return err
			}
			out = append(out, &k)
			return nil
		})
	})
	return out, err
}

func (s *store) deleteKey(hash string) error {
	return s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketKeys).Delete([]byte(hash)) })
}

func (s *store) putPool(p api.Pool) error {
	p.Ready = 0
	return s.db.Update(func(tx *bolt.Tx) error { return put(tx, bucketPools, p.Name, p) })
}

func (s *store) deletePool(name string) error {
	return s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketPools).Delete([]byte(name)) })
}

func (s *store) pools() ([]api.Pool, error) {
	var out []api.Pool
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketPools).ForEach(func(_, v []byte) error {
			var p api.Pool
			if err := json.Unmarshal(v, &p); err != nil {
				return err
			}
			out = append(out, p)
			return nil
		})
	})
	return out, err
}

func (s *store) putSnapshot(sn api.Snapshot) error {
	return s.db.Update(func(tx *bolt.Tx) error { return put(tx, bucketSnapshots, sn.ID, sn) })
}

// get reads one JSON value of a bucket into v; false when there is none.
func (s *store) get(bucket []byte, key string, v any) (bool, error) {
	found := false
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket).Get([]byte(key))
		if b == nil {
			return nil
		}
		found = true
		return json.Unmarshal(b, v)
	})
	return found, err
}

func (s *store) deleteSnapshot(id string) error {
	return s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketSnapshots).Delete([]byte(id)) })
}

func (s *store) snapshots() ([]api.Snapshot, error) {
	var out []api.Snapshot
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSnapshots).ForEach(func(_, v []byte) error {
			var sn api.Snapshot
			if err := json.Unmarshal(v, &sn); err != nil {
				return err
			}
			out = append(out, sn)
			return nil
		})
	})
	return out, err
}

func templateKey(tenant, name string) string { return tenant + "/" + name }

func (s *store) putTemplate(t api.Template) error {
	return s.db.Update(func(tx *bolt.Tx) error { return put(tx, bucketTemplates, templateKey(t.Tenant, t.Name), t) })
}

func (s *store) deleteTemplate(tenant, name string) error {
	return s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketTemplates).Delete([]byte(templateKey(tenant, name))) })
}

func (s *store) templates() ([]api.Template, error) {
	var out []api.Template
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketTemplates).ForEach(func(_, v []byte) error {
			var t api.Template
			if err := json.Unmarshal(v, &t); err != nil {
				return err
			}
			out = append(out, t)
			return nil
		})
	})
	return out, err
}
