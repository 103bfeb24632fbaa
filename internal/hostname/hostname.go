// Package hostname checks host names as DNS writes them (RFC 1123): what an
// egress rule and an image's registry must be, where a parser of their own
// lets through a name no resolver takes ("a..test", "..").
package hostname

import "strings"

// Valid reports whether name is a host name: at most 253 bytes of
// dot-separated labels, each 1 to 63 ASCII letters, digits or '-', neither
// beginning nor ending with '-'.
func Valid(name string) bool {
	if name == "" || len(name) > 253 {
		return false
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' ||
			strings.Trim(strings.ToLower(label), "abcdefghijklmnopqrstuvwxyz0123456789-") != "" {
			return false
		}
	}
	return true
}
