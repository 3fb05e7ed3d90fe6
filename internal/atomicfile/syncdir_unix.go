//go:build !windows

package atomicfile

import (
	"fmt"
	"os"
)

// syncDir fsyncs dir, so that a rename in it is on disk.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}
