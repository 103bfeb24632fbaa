package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"path"
	"strings"

	"github.com/cordon-sandbox/cordon/agent/wire"
	"github.com/cordon-sandbox/cordon/server/api"
)

// maxUploadParts bounds the parts of one uploaded form, files or not.
const maxUploadParts = 1000

// handleUpload serves POST /v1/sandboxes/ID/files[?path=P][&mode=OCTAL],
// the shape of upload a browser form or E2B's SDK makes: a form
// (multipart/form-data) whose parts named "file" are files, each written
// to P when the query names it (the form then holds one file) or else to
// the path its file name gives (relative: under the workspace); or any
// other body, which is written to P as a PUT writes it. Each file is
// replaced atomically, one after another: a refusal leaves the files
// before it written, and says so. It answers with the files written, as
// a list of {path, name, type, size}.
func (s *Server) handleUpload(w http.ResponseWriter, r *http.Request) {
	e, ok := s.usable(w, r)
	if !ok {
		return
	}
	if !hasFeature(e, "raw-files") {
		writeError(w, http.StatusNotImplemented, api.CodeUnsupported, "this sandbox's agent lacks raw-files")
		return
	}
	q := r.URL.Query()
	target, mode := q.Get("path"), q.Get("mode")
	media, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	form := strings.HasPrefix(media, "multipart/")
	switch {
	case !form && target == "":
		writeError(w, http.StatusBadRequest, api.CodeInvalid, "the path query parameter is required, unless the body is a form (multipart/form-data) whose files have names")
		return
	case form && params["boundary"] == "":
		writeError(w, http.StatusBadRequest, api.CodeInvalid, "Content-Type: a multipart form without its boundary")
		return
	case (form || r.ContentLength < 0) && !hasFeature(e, "files-chunked"):
		// A form's files come without their lengths.
		writeError(w, http.StatusNotImplemented, api.CodeUnsupported, "this sandbox's agent lacks files-chunked, which a form's files (or a body without a Content-Length) need: PUT the file with a Content-Length")
		return
	}
	done, ok := s.stream(w, r, e)
	if !ok {
		return
	}
	defer done()
	var written []api.UploadedFile
	// refuse answers a refusal of the n-th file, naming what was written
	// before it.
	refuse := func(status int, code, msg string) {
		if len(written) > 0 {
			names := make([]string, len(written))
			for i, f := range written {
				names[i] = f.Path
			}
			msg += fmt.Sprintf(" (written before it: %s)", strings.Join(names, ", "))
		}
		writeError(w, status, code, msg)
	}
	put := func(p string, body io.Reader, length int64) bool {
		query := url.Values{"path": {p}}
		if mode != "" {
			query.Set("mode", mode)
		}
		watched := watchBody(io.NopCloser(body))
		resp, err := e.agent.request(r.Context(), http.MethodPut, wire.RouteFiles+"?"+query.Encode(), watched, length, nil)
		switch {
		case err == nil:
		case r.Context().Err() != nil:
			return false // the caller went away
		case watched.failed() != nil:
			refuse(http.StatusBadRequest, api.CodeInvalid, fmt.Sprintf("writing %s: the request's body: %v; the file was left as it was", p, watched.failed()))
			return false
		default:
			refuse(http.StatusBadGateway, api.CodeAgent, fmt.Sprintf("writing %s: the sandbox's agent did not answer: %v", p, err))
			return false
		}
		defer resp.Body.Close()
		if resp.StatusCode >= 400 {
			var ae api.Error
			if fileRefusal(resp) == nil && json.NewDecoder(resp.Body).Decode(&ae) == nil {
				refuse(resp.StatusCode, ae.Code, fmt.Sprintf("writing %s: %s", p, ae.Message))
			} else {
				refuse(http.StatusBadGateway, api.CodeAgent, fmt.Sprintf("writing %s: the agent answered %d", p, resp.StatusCode))
			}
			return false
		}
		var out wire.WriteFileResponse
		if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&out); err != nil {
			refuse(http.StatusBadGateway, api.CodeAgent, fmt.Sprintf("writing %s: the agent's answer: %v", p, err))
			return false
		}
		where := out.Path
		if where == "" {
			where = p
		}
		written = append(written, api.UploadedFile{Path: where, Name: path.Base(where), Type: "file", Size: int64(out.BytesWritten)})
		return true
	}
	if !form {
		if !put(target, r.Body, r.ContentLength) {
			return
		}
		writeJSON(w, http.StatusOK, written)
		return
	}
	mr := multipart.NewReader(r.Body, params["boundary"])
	for n := 0; ; n++ {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if r.Context().Err() == nil {
				refuse(http.StatusBadRequest, api.CodeInvalid, "the form: "+err.Error())
			}
			return
		}
		if n == maxUploadParts {
			refuse(http.StatusRequestEntityTooLarge, api.CodeTooLarge, fmt.Sprintf("a form may have at most %d parts", maxUploadParts))
			return
		}
		if part.FormName() != "file" {
			// Other fields are passed over, as E2B's envd does.
			continue
		}
		p := target
		if p == "" {
			// The name as sent, directories and all (Part.FileName keeps
			// only its last element).
			_, dp, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
			if p = dp["filename"]; p == "" {
				refuse(http.StatusBadRequest, api.CodeInvalid, "a file part without a file name: give it one, or name the path (?path=)")
				return
			}
		} else if len(written) == 1 {
			refuse(http.StatusBadRequest, api.CodeInvalid, "with the path query parameter, a form holds one file (named \"file\")")
			return
		}
		if !put(p, filled{part}, -1) {
			return
		}
	}
	if len(written) == 0 {
		writeError(w, http.StatusBadRequest, api.CodeInvalid, "the form holds no file: its files are the parts named \"file\"")
		return
	}
	writeJSON(w, http.StatusOK, written)
}

// filled reads from r until p is full, or r ends or fails: a form's part
// yields a few KiB a read, each of which would be a chunk of its own on
// the way to the agent.
type filled struct{ r io.Reader }

func (f filled) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		k, err := f.r.Read(p[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
