package server

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cordon-sandbox/cordon/server/api"
)

// A file URL lets whoever holds it read (GET, HEAD) or write (PUT, or POST
// a form holding the file, as E2B's upload URLs take it) one path of one
// sandbox until it expires, without an API key: what a front
// end hands a browser, as E2B's download_url and upload_url do. It is
// signed with the daemon's own key (url.key in the state directory, made
// at the first start), which binds the sandbox, the path, the method and
// the expiry; nothing else is kept, so a URL outlives a daemon restart and
// cannot be revoked before it expires (at most MaxFileURLSeconds).

const (
	DefaultFileURLSeconds = 3600
	MaxFileURLSeconds     = 24 * 3600
	maxFileURLPath        = 4096
)

// fileGrant is what a file URL grants.
type fileGrant struct {
	Sandbox string `json:"s"`
	Path    string `json:"p"`
	Method  string `json:"m"`
	Expires int64  `json:"e"` // Unix seconds
}

// loadURLKey reads the daemon's key for file URLs from dir, making one
// the first time.
func loadURLKey(dir string) ([]byte, error) {
	p := filepath.Join(dir, "url.key")
	if b, err := os.ReadFile(p); err == nil && len(b) == 32 {
		return b, nil
	} else if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("the key for file URLs (%s): want 32 bytes: %v", p, err)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("the key for file URLs: %w", err)
	}
	_, err = f.Write(key)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return key, err
}

// sign is g as a file URL's token: its JSON and MAC, each base64url.
func (s *Server) sign(g fileGrant) string {
	b, _ := json.Marshal(g)
	payload := base64.RawURLEncoding.EncodeToString(b)
	return payload + "." + base64.RawURLEncoding.EncodeToString(s.mac(payload))
}

func (s *Server) mac(payload string) []byte {
	m := hmac.New(sha256.New, s.urlKey)
	m.Write([]byte("cordon file URL\x00" + payload))
	return m.Sum(nil)
}

// grantOf checks token and returns what it grants.
func (s *Server) grantOf(token string) (fileGrant, bool) {
	var g fileGrant
	payload, sig, ok := strings.Cut(token, ".")
	if !ok || len(token) > 8192 {
		return g, false
	}
	want, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(want, s.mac(payload)) {
		return g, false
	}
	b, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil || json.Unmarshal(b, &g) != nil {
		return g, false
	}
	return g, time.Now().Unix() < g.Expires
}

// handleFileURL answers POST /v1/sandboxes/ID/file-urls {path, method,
// expiresInSeconds}: a URL of the daemon that reads (GET, the default) or
// writes (PUT) that path of the caller's sandbox without a key.
func (s *Server) handleFileURL(w http.ResponseWriter, r *http.Request) {
	e, ok := s.lookup(w, r)
	if !ok {
		return
	}
	var req api.FileURLRequest
	if !readJSON(w, r, s.cfg.Limits.MaxBodyBytes, &req) {
		return
	}
	req.Method = strings.ToUpper(req.Method)
	switch {
	case req.Path == "" || len(req.Path) > maxFileURLPath || strings.ContainsRune(req.Path, 0):
		writeError(w, http.StatusBadRequest, api.CodeInvalid, fmt.Sprintf("path: 1 to %d bytes, without NUL", maxFileURLPath))
		return
	case req.Method != "" && req.Method != http.MethodGet && req.Method != http.MethodPut:
		writeError(w, http.StatusBadRequest, api.CodeInvalid, "method: GET (to read the file, the default) or PUT (to write it)")
		return
	case req.ExpiresInSeconds < 0 || req.ExpiresInSeconds > MaxFileURLSeconds:
		writeError(w, http.StatusBadRequest, api.CodeInvalid, fmt.Sprintf("expiresInSeconds: 1 to %d (0: %d)", MaxFileURLSeconds, DefaultFileURLSeconds))
		return
	}
	g := fileGrant{Sandbox: e.rec.ID, Path: req.Path, Method: cmp.Or(req.Method, http.MethodGet),
		Expires: time.Now().Unix() + int64(cmp.Or(req.ExpiresInSeconds, DefaultFileURLSeconds))}
	writeJSON(w, http.StatusOK, api.FileURL{URL: "/v1/file-urls/" + s.sign(g), Method: g.Method, ExpiresAt: time.Unix(g.Expires, 0).UTC()})
}

// handleFileURLUse serves /v1/file-urls/{token}: the file route its grant
// names, as the sandbox's tenant would call it. A token that is not one,
// has expired, or names another method is 404, as a sandbox not there.
func (s *Server) handleFileURLUse(w http.ResponseWriter, r *http.Request) {
	// The URL is the credential, never a cookie: a page of any origin
	// that holds it may use it.
	w.Header().Set("Access-Control-Allow-Origin", "*")
	if r.Method == http.MethodOptions {
		w.Header().Set("Access-Control-Allow-Methods", "GET, HEAD, PUT, POST")
		w.Header().Set("Access-Control-Allow-Headers", "Content-Type, Range")
		w.Header().Set("Access-Control-Max-Age", "600")
		w.WriteHeader(http.StatusNoContent)
		return
	}
	g, ok := s.grantOf(r.PathValue("token"))
	method := r.Method
	switch method {
	case http.MethodHead:
		method = http.MethodGet
	case http.MethodPost:
		method = http.MethodPut
	}
	s.mu.Lock()
	e := s.live[g.Sandbox]
	s.mu.Unlock()
	if !ok || method != g.Method || e == nil || e.sb == nil {
		writeError(w, http.StatusNotFound, api.CodeNotFound, "no such file URL, or it has expired")
		return
	}
	r2 := r.Clone(context.WithValue(r.Context(), callerKey, &caller{tenant: e.rec.Tenant}))
	r2.URL.Path = "/v1/sandboxes/" + g.Sandbox + "/files"
	r2.URL.RawQuery = url.Values{"path": {g.Path}}.Encode()
	r2.SetPathValue("id", g.Sandbox)
	if r.Method == http.MethodPost {
		s.handleUpload(w, r2)
		return
	}
	s.handleFiles(w, r2)
}
