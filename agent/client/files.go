package client

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/cordon-sandbox/cordon/agent/wire"
)

// ReadFile reads a whole file.
func (c *Client) ReadFile(ctx context.Context, path string) ([]byte, error) {
	return c.readFile(ctx, wire.ReadFileRequest{Path: path, Encoding: "base64"})
}

// ReadFileRange reads length bytes from offset (at most wire.FileRangeMaxBytes).
func (c *Client) ReadFileRange(ctx context.Context, path string, offset, length int64) ([]byte, error) {
	return c.readFile(ctx, wire.ReadFileRequest{Path: path, Encoding: "base64", Range: &wire.Range{Version: 1, Offset: offset, Length: &length}})
}

func (c *Client) readFile(ctx context.Context, req wire.ReadFileRequest) ([]byte, error) {
	resp, err := c.do(ctx, http.MethodPost, wire.RouteReadFile, req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return nil, errorFrom(resp.StatusCode, b)
	}
	return decodeContent(resp.Body)
}

// decodeContent finds "content" in a read-file answer and decodes its base64
// straight from the raw JSON, without an intermediate string.
func decodeContent(r io.Reader) ([]byte, error) {
	dec := json.NewDecoder(r)
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, fmt.Errorf("agent answered malformed JSON: %v", err)
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("agent answered malformed JSON: %w", err)
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("agent answered malformed JSON: %w", err)
		}
		if key != "content" {
			continue
		}
		if len(raw) < 2 || raw[0] != '"' {
			return nil, errors.New("agent answered a content that is not a string")
		}
		body := raw[1 : len(raw)-1]
		if bytes.IndexByte(body, '\\') >= 0 {
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return nil, err
			}
			body = []byte(s)
		}
		out := make([]byte, base64.StdEncoding.DecodedLen(len(body)))
		n, err := base64.StdEncoding.Decode(out, body)
		return out[:n], err
	}
	return nil, errors.New("agent answered without content")
}

// WriteFile writes a whole file. The base64 body is streamed with an exact
// Content-Length, so a large file is never held twice in memory.
func (c *Client) WriteFile(ctx context.Context, path string, data []byte) error {
	p, err := json.Marshal(path)
	if err != nil {
		return err
	}
	head := []byte(`{"path":` + string(p) + `,"encoding":"base64","content":"`)
	tail := []byte(`"}`)
	pr, pw := io.Pipe()
	go func() {
		enc := base64.NewEncoder(base64.StdEncoding, pw)
		_, err := enc.Write(data)
		if err == nil {
			err = enc.Close()
		}
		pw.CloseWithError(err)
	}()
	defer pr.Close()
	body := io.MultiReader(bytes.NewReader(head), pr, bytes.NewReader(tail))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+wire.RouteWriteFile, body)
	if err != nil {
		return err
	}
	req.ContentLength = int64(len(head) + base64.StdEncoding.EncodedLen(len(data)) + len(tail))
	req.Header.Set("Content-Type", "application/json")
	c.auth(req)
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var r wire.WriteFileResponse
	return decode(resp, &r)
}

func (c *Client) filesURL(path string) string {
	return c.base + wire.RouteFiles + "?path=" + url.QueryEscape(path)
}

// Download copies a file to w as a raw stream (feature "raw-files"); with
// length > 0 only that many bytes from offset.
func (c *Client) Download(ctx context.Context, path string, offset, length int64, w io.Writer) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.filesURL(path), nil)
	if err != nil {
		return 0, err
	}
	if offset > 0 || length > 0 {
		end := ""
		if length > 0 {
			end = strconv.FormatInt(offset+length-1, 10)
		}
		req.Header.Set("Range", "bytes="+strconv.FormatInt(offset, 10)+"-"+end)
	}
	c.auth(req)
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusPartialContent {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return 0, errorFrom(resp.StatusCode, b)
	}
	// The agent always says how long a file is; an answer that does not,
	// or that is longer than the range asked for, could go on without
	// end (the agent runs inside the sandbox) and is refused unread.
	if resp.ContentLength < 0 || length > 0 && resp.ContentLength > length {
		return 0, fmt.Errorf("agent answered %s with a body of length %d", path, resp.ContentLength)
	}
	n, err := io.Copy(w, resp.Body)
	if err == nil && n != resp.ContentLength {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// Upload replaces a file with size bytes from r (feature "raw-files"), or
// with all of r when size is -1 (chunked: feature "files-chunked"); the
// agent swaps it in atomically, so a failed upload leaves the old file.
func (c *Client) Upload(ctx context.Context, path string, r io.Reader, size int64) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.filesURL(path), io.NopCloser(r))
	if err != nil {
		return err
	}
	req.ContentLength = max(size, -1)
	c.auth(req)
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var out wire.WriteFileResponse
	return decode(resp, &out)
}

func (c *Client) fsCall(ctx context.Context, method, route, path string, extra string, out any) error {
	resp, err := c.do(ctx, method, route+"?path="+url.QueryEscape(path)+extra, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return decode(resp, out)
}

// Stat describes a file or directory (feature "fs-ops").
func (c *Client) Stat(ctx context.Context, path string) (*wire.FileInfo, error) {
	var fi wire.FileInfo
	if err := c.fsCall(ctx, http.MethodGet, wire.RouteStat, path, "", &fi); err != nil {
		return nil, err
	}
	return &fi, nil
}

// List reads a directory (feature "fs-ops").
func (c *Client) List(ctx context.Context, path string) (*wire.ListResponse, error) {
	var l wire.ListResponse
	if err := c.fsCall(ctx, http.MethodGet, wire.RouteList, path, "", &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// Mkdir creates a directory and its parents (feature "fs-ops").
func (c *Client) Mkdir(ctx context.Context, path string) error {
	return c.fsCall(ctx, http.MethodPost, wire.RouteMkdir, path, "", &wire.OKResponse{})
}

// Rename moves path to to, replacing a file there (feature "fs-rename"),
// and describes it where it now is.
func (c *Client) Rename(ctx context.Context, path, to string) (*wire.FileInfo, error) {
	var fi wire.FileInfo
	if err := c.fsCall(ctx, http.MethodPost, wire.RouteRename, path, "&to="+url.QueryEscape(to), &fi); err != nil {
		return nil, err
	}
	return &fi, nil
}

// Remove removes a file, symlink or empty directory; recursive removes a
// directory with its contents (feature "fs-ops").
func (c *Client) Remove(ctx context.Context, path string, recursive bool) error {
	extra := ""
	if recursive {
		extra = "&recursive=1"
	}
	return c.fsCall(ctx, http.MethodPost, wire.RouteRemove, path, extra, &wire.OKResponse{})
}

// Usage asks what the sandbox's commands use now (feature "usage").
func (c *Client) Usage(ctx context.Context) (*wire.Usage, error) {
	var u wire.Usage
	if err := c.get(ctx, wire.RouteUsage, &u); err != nil {
		return nil, err
	}
	return &u, nil
}
