package pgtest_test

import (
	"bytes"
	"fmt"
	"os"
)

// processRuns reports whether the process pid exists and has not exited (a zombie waiting
// to be reaped has exited).
func processRuns(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || !bytes.HasPrefix(b[i+1:], []byte(" Z"))
}
