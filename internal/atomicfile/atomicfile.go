// Package atomicfile replaces a file so that a reader, or a crash at any
// point, sees the old content or the new, never a part: the relay's state
// files, which a successor reads after a kill -9 or a power loss.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write replaces path with data: a temporary file beside it, fsynced,
// renamed over path, and the directory fsynced so that the rename itself
// survives a power loss (where the system lets a directory be synced).
func Write(path string, data []byte) error {
	dir, name := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+name+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return syncDir(dir)
}
