package operator

import (
	"bufio"
	"io"
	"strings"
)

// eachLine calls fn with each line of an operator's list file that holds
// something: its number (from 1) and its text with the space around it
// (no-break space included) removed. A byte-order mark at the start of the
// file is dropped; empty lines and lines starting with # are skipped. It
// stops at fn's first error and returns it, or the read error.
func eachLine(r io.Reader, fn func(n int, line string) error) error {
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if n == 1 {
			line = strings.TrimPrefix(line, "\uFEFF")
		}
		line = strings.TrimFunc(line, isSpace)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := fn(n, line); err != nil {
			return err
		}
	}
	return sc.Err()
}
