//go:build !linux

package disk

import (
	"context"
	"errors"
)

var errUnsupported = errors.New("persistent disks need Linux")

func Create(ctx context.Context, path string, size int64) error { return errUnsupported }
func Mount(ctx context.Context, image, dir string) error        { return errUnsupported }
func Unmount(dir string) error                                  { return errUnsupported }
func Available() error                                          { return errUnsupported }

var ErrNoReflinks = errUnsupported

func Clone(src, dst string) error               { return errUnsupported }
func Reflinks(dir string) bool                  { return false }
func Freeze(image string) (func() error, error) { return nil, errUnsupported }
func Mounted(image string) bool                 { return false }
func Capacity(dir string) (int64, error)        { return 0, errUnsupported }
