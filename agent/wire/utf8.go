package wire

import "unicode/utf8"

// CompleteUTF8 is the length of the longest prefix of b that does not end
// inside a multi-byte character that could still be completed: where a
// stream of bytes may be cut for text (a delta, a read of output or of a
// file), the bytes after it go with what follows.
func CompleteUTF8(b []byte) int {
	n := len(b)
	for i := 1; i <= 3 && i <= n; i++ {
		c := b[n-i]
		if c < 0x80 {
			return n // ASCII: nothing pending
		}
		if c >= 0xc0 { // a lead byte i bytes from the end
			need := 0
			switch {
			case c >= 0xf0:
				need = 4
			case c >= 0xe0:
				need = 3
			default:
				need = 2
			}
			if need > i && !utf8.FullRune(b[n-i:]) {
				return n - i
			}
			return n
		}
	}
	return n
}
