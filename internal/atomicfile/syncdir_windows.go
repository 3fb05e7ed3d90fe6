//go:build windows

package atomicfile

// syncDir does nothing on Windows: a directory cannot be opened for a
// flush there (FlushFileBuffers on a directory handle is refused), and
// NTFS journals the rename itself.
func syncDir(string) error { return nil }
