package runs

import (
	"bytes"
	"container/heap"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// The questpie server's admission headers.
const (
	HostAdmissionHeader     = "x-questpie-sandbox-host-admission"
	WorkloadAdmissionHeader = "x-questpie-workload-admission"
	// DenialMessage is all a denied caller is told; the reason goes to
	// the audit log.
	DenialMessage = "The workload is not authorized for this sandbox operation."

	admissionVersion   = "qpsw1"
	minSecretBytes     = 32
	maxAdmissionTTL    = 5 * time.Second
	DefaultReplayCache = 10_000
	DefaultKeyID       = "sandbox-workload-v1"
)

// Admission decides which /run requests are let in: "host" requests carry
// the host's shared secret, "workload" requests an HMAC-signed claim bound
// to their exact body, used once.
type Admission struct {
	// HostSecret is the host service's key (at least 32 bytes); empty
	// denies every host request.
	HostSecret string
	// WorkloadSecret signs workload admissions (at least 32 bytes, with
	// KeyID and InstanceID); empty denies every workload request.
	WorkloadSecret string
	KeyID          string
	// InstanceID names this server process; admissions for another are
	// refused. Rotate it on every restart.
	InstanceID string

	replayOnce sync.Once
	replay     *replayCache
}

// identity: 1 to 128 of A-Z a-z 0-9 _ - (hand-written: a compiled regexp
// costs every cordon command its start-up time).
func identity(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func sha256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// Check refuses a configuration the seed's server would not start with.
func (a *Admission) Check() error {
	if a.HostSecret != "" && len(a.HostSecret) < minSecretBytes {
		return fmt.Errorf("the host admission secret must be at least %d bytes", minSecretBytes)
	}
	if a.WorkloadSecret == "" {
		return nil
	}
	if a.KeyID == "" {
		a.KeyID = DefaultKeyID
	}
	if len(a.WorkloadSecret) < minSecretBytes || !identity(a.KeyID) || !identity(a.InstanceID) {
		return errors.New("invalid sandbox workload admission configuration: the secret must be at least 32 bytes, the key id and instance id 1 to 128 of A-Z a-z 0-9 _ -")
	}
	return nil
}

// hostAdmitted compares the header with the host secret in constant time.
func (a *Admission) hostAdmitted(header string) bool {
	if len(a.HostSecret) < minSecretBytes || header == "" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(header), []byte(a.HostSecret)) == 1
}

// Claims are a workload admission's signed content.
type Claims struct {
	Kind                 string `json:"kind"`
	Version              int    `json:"version"`
	AdmissionID          string `json:"admissionId"`
	SupervisorInstanceID string `json:"supervisorInstanceId"`
	ExpiresAt            string `json:"expiresAt"`
	RequestSha256        string `json:"requestSha256"`
}

// verifyWorkload checks an admission envelope against the body it came
// with; the reason on refusal is one of invalid, wrong_instance, expired
// and body_mismatch. Claims are returned whenever the signature held.
func (a *Admission) verifyWorkload(envelope string, body []byte, now time.Time) (*Claims, string) {
	if len(a.WorkloadSecret) < minSecretBytes {
		return nil, "invalid"
	}
	parts := strings.Split(envelope, ".")
	if len(parts) != 4 || parts[0] != admissionVersion || parts[1] != b64url([]byte(a.KeyID)) {
		return nil, "invalid"
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[3])
	if err != nil {
		return nil, "invalid"
	}
	mac := hmac.New(sha256.New, []byte(a.WorkloadSecret))
	mac.Write([]byte(parts[0] + "." + parts[1] + "." + parts[2]))
	if !hmac.Equal(sig, mac.Sum(nil)) {
		return nil, "invalid"
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return nil, "invalid"
	}
	var c Claims
	if !exactKeys(payload, "kind", "version", "admissionId", "supervisorInstanceId", "expiresAt", "requestSha256") || json.Unmarshal(payload, &c) != nil {
		return nil, "invalid"
	}
	exp, err := time.Parse(time.RFC3339Nano, c.ExpiresAt)
	if c.Kind != "sandbox_workload_admission" || c.Version != 1 || !identity(c.AdmissionID) ||
		!identity(c.SupervisorInstanceID) || err != nil || !sha256Hex(c.RequestSha256) {
		return nil, "invalid"
	}
	if c.SupervisorInstanceID != a.InstanceID {
		return &c, "wrong_instance"
	}
	if !exp.After(now) || exp.After(now.Add(maxAdmissionTTL)) {
		return &c, "expired"
	}
	sum := sha256.Sum256(body)
	if c.RequestSha256 != hex.EncodeToString(sum[:]) {
		return &c, "body_mismatch"
	}
	return &c, ""
}

// Seal makes a workload admission for body, as a questpie host does (tests
// and hosts written in Go use it).
func (a *Admission) Seal(c Claims, body []byte) string {
	sum := sha256.Sum256(body)
	c.RequestSha256 = hex.EncodeToString(sum[:])
	payload, _ := json.Marshal(c)
	signed := admissionVersion + "." + b64url([]byte(a.KeyID)) + "." + b64url(payload)
	mac := hmac.New(sha256.New, []byte(a.WorkloadSecret))
	mac.Write([]byte(signed))
	return signed + "." + b64url(mac.Sum(nil))
}

func b64url(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// exactKeys says whether a JSON object has exactly these keys.
func exactKeys(obj []byte, keys ...string) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(obj, &m) != nil || len(m) != len(keys) {
		return false
	}
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			return false
		}
	}
	return bytes.HasPrefix(bytes.TrimSpace(obj), []byte("{"))
}

// consume admits an admission id once, until it expires; a full cache
// refuses (fail closed) rather than forgetting an id still valid.
func (a *Admission) consume(c *Claims, now time.Time) bool {
	a.replayOnce.Do(func() { a.replay = newReplayCache(DefaultReplayCache) })
	exp, _ := time.Parse(time.RFC3339Nano, c.ExpiresAt)
	return a.replay.consume(c.AdmissionID, exp, now)
}

type replayCache struct {
	mu   sync.Mutex
	max  int
	seen map[string]time.Time
	exp  expiries
}

func newReplayCache(max int) *replayCache {
	return &replayCache{max: max, seen: map[string]time.Time{}}
}

func (r *replayCache) consume(id string, exp, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.exp) > 0 && !r.exp[0].at.After(now) {
		e := heap.Pop(&r.exp).(expiry)
		if r.seen[e.id].Equal(e.at) {
			delete(r.seen, e.id)
		}
	}
	if _, dup := r.seen[id]; dup || len(r.seen) >= r.max || !exp.After(now) {
		return false
	}
	r.seen[id] = exp
	heap.Push(&r.exp, expiry{id, exp})
	return true
}

type expiry struct {
	id string
	at time.Time
}

type expiries []expiry

func (e expiries) Len() int           { return len(e) }
func (e expiries) Less(i, j int) bool { return e[i].at.Before(e[j].at) }
func (e expiries) Swap(i, j int)      { e[i], e[j] = e[j], e[i] }
func (e *expiries) Push(x any)        { *e = append(*e, x.(expiry)) }
func (e *expiries) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}
