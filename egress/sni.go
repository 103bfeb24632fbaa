package egress

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
)

// maxHello bounds how much of a ClientHello is read to find its SNI.
const maxHello = 64 << 10

// readSNI peeks (without consuming) the TLS ClientHello at the head of br
// and returns its server name, "" when it sends none.
func readSNI(br *bufio.Reader) (string, error) {
	var hs []byte
	off := 0
	for len(hs) < 4 || len(hs) < 4+int(hs[1])<<16|int(hs[2])<<8|int(hs[3]) {
		hdr, err := br.Peek(off + 5)
		if err != nil {
			return "", err
		}
		h := hdr[off:]
		if h[0] != 0x16 {
			return "", errors.New("not a handshake record")
		}
		n := int(binary.BigEndian.Uint16(h[3:5]))
		if off+5+n > maxHello || n == 0 {
			return "", errors.New("ClientHello too large")
		}
		rec, err := br.Peek(off + 5 + n)
		if err != nil {
			return "", err
		}
		hs = append(hs, rec[off+5:]...)
		off += 5 + n
	}
	return parseClientHello(hs)
}

// parseClientHello reads the server_name extension of a handshake message.
func parseClientHello(hs []byte) (string, error) {
	if len(hs) < 4 || hs[0] != 1 {
		return "", errors.New("not a ClientHello")
	}
	body := hs[4 : 4+(int(hs[1])<<16|int(hs[2])<<8|int(hs[3]))]
	r := reader{b: body}
	r.skip(2 + 32) // version, random
	r.skip(int(r.u8()))
	r.skip(int(r.u16()))
	r.skip(int(r.u8()))
	if r.err != nil || len(r.b) == 0 {
		return "", r.errOr("no extensions")
	}
	ext := reader{b: r.bytes(int(r.u16()))}
	for ext.err == nil && len(ext.b) > 0 {
		typ, data := ext.u16(), ext.bytes(int(ext.u16()))
		if typ != 0 {
			continue
		}
		list := reader{b: data}
		names := reader{b: list.bytes(int(list.u16()))}
		for names.err == nil && len(names.b) > 0 {
			kind, name := names.u8(), names.bytes(int(names.u16()))
			if kind == 0 && names.err == nil {
				return string(name), nil
			}
		}
		return "", names.errOr("empty server_name")
	}
	return "", ext.err
}

type reader struct {
	b   []byte
	err error
}

func (r *reader) need(n int) bool {
	if r.err == nil && (n < 0 || len(r.b) < n) {
		r.err = fmt.Errorf("truncated ClientHello")
	}
	return r.err == nil
}

func (r *reader) skip(n int) {
	if r.need(n) {
		r.b = r.b[n:]
	}
}

func (r *reader) u8() uint8 {
	if !r.need(1) {
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *reader) u16() uint16 {
	if !r.need(2) {
		return 0
	}
	v := binary.BigEndian.Uint16(r.b)
	r.b = r.b[2:]
	return v
}

func (r *reader) bytes(n int) []byte {
	if !r.need(n) {
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) errOr(msg string) error {
	if r.err != nil {
		return r.err
	}
	return errors.New(msg)
}
