//go:build !linux

package mounted

func detachBelow(string) error { return nil }
