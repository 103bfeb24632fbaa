package server

import (
	"crypto/rand"
	_ "embed"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/cordon-sandbox/cordon/internal/printable"
	"github.com/cordon-sandbox/cordon/server/api"
)

// NewKeySecret mints an API key: 256 random bits, prefixed so that a
// leaked key is recognisable in logs and scanners.
func NewKeySecret() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return "cordon_" + base64.RawURLEncoding.EncodeToString(b[:])
}

// AddKey stores a key for tenant (the secret itself is never stored, only
// its hash) and returns its record. It is how `cordon serve` installs the
// admin key it is given.
func (s *Server) AddKey(secret, tenant, name string, admin bool) (*api.Key, error) {
	if len(secret) < 32 {
		return nil, errors.New("an API key must be at least 32 characters")
	}
	if !validName(tenant, 64, true) {
		return nil, errors.New("a tenant name is 1-64 of letters, digits, '.', '_' and '-'")
	}
	if len(name) > 128 || !printable.Valid(name) {
		return nil, errors.New("a key's name is at most 128 bytes of printable characters")
	}
	h := hashKey(secret)
	s.mu.Lock()
	if k := s.keys[h]; k != nil {
		s.mu.Unlock()
		if k.Tenant != tenant || k.Admin != admin {
			return nil, errors.New("this key is already registered for another tenant or role")
		}
		return &k.Key, nil
	}
	s.mu.Unlock()
	var id [6]byte
	_, _ = rand.Read(id[:])
	k := &keyRecord{Key: api.Key{ID: "key_" + hex.EncodeToString(id[:]), Tenant: tenant, Name: name, Admin: admin, CreatedAt: time.Now().UTC()}, Hash: h}
	if err := s.store.putKey(k); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.keys[h] = k
	s.mu.Unlock()
	return &k.Key, nil
}

func (s *Server) handleCreateKey(w http.ResponseWriter, r *http.Request) {
	var in api.KeyRequest
	if !readJSON(w, r, s.cfg.Limits.MaxBodyBytes, &in) {
		return
	}
	secret := NewKeySecret()
	k, err := s.AddKey(secret, in.Tenant, in.Name, in.Admin)
	if err != nil {
		writeError(w, http.StatusBadRequest, api.CodeInvalid, err.Error())
		return
	}
	out := *k
	out.Secret = secret
	writeJSON(w, http.StatusCreated, out)
}

func (s *Server) handleListKeys(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	out := make([]api.Key, 0, len(s.keys))
	for _, k := range s.keys {
		out = append(out, k.Key)
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b api.Key) int { return a.CreatedAt.Compare(b.CreatedAt) })
	writeJSON(w, http.StatusOK, map[string]any{"keys": out})
}

func (s *Server) handleDeleteKey(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("kid")
	s.mu.Lock()
	var hash string
	for h, k := range s.keys {
		if k.ID == id {
			hash = h
		}
	}
	s.mu.Unlock()
	if hash == "" {
		writeError(w, http.StatusNotFound, api.CodeNotFound, "no key "+id)
		return
	}
	if err := s.store.deleteKey(hash); err != nil {
		writeErr(w, err)
		return
	}
	s.mu.Lock()
	delete(s.keys, hash)
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

//go:embed openapi.yaml
var openAPI []byte

func serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(openAPI)
}

// openAPIRoutes lists "METHOD /path" for every operation in the document,
// read from its paths section (two-space path keys, four-space methods).
func openAPIRoutes() []string {
	var out []string
	path, inPaths := "", false
	for _, line := range strings.Split(string(openAPI), "\n") {
		switch {
		case line == "paths:":
			inPaths = true
		case inPaths && len(line) > 0 && line[0] != ' ' && line[0] != '#':
			inPaths = false
		case inPaths && strings.HasPrefix(line, "  /") && strings.HasSuffix(line, ":"):
			path = strings.TrimSuffix(strings.TrimSpace(line), ":")
		case inPaths && path != "" && strings.HasPrefix(line, "    ") && !strings.HasPrefix(line, "     ") && strings.HasSuffix(line, ":"):
			m := strings.TrimSuffix(strings.TrimSpace(line), ":")
			switch m {
			case "get", "put", "post", "delete", "patch", "head", "options":
				out = append(out, strings.ToUpper(m)+" "+path)
			}
		}
	}
	return out
}
