// Package resp reads commands in the Redis serialization protocol (RESP):
// arrays of bulk strings, as a client sends them to a server and as an
// append-only file stores them. It is test tooling (the server-side audit
// reads the AOF with it, and scripted servers in tests read their
// clients' requests), not a client: replies are not its business.
package resp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// ErrTruncated is returned when the input ends inside a command.
var ErrTruncated = errors.New("resp: truncated command")

// ReadCommand reads one command, an array of one or more bulk strings. It
// returns nil, nil for an annotation line (one that starts with '#', which
// an AOF writes between commands) and io.EOF at a clean end of input.
func ReadCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err == io.EOF && line == "" {
		return nil, io.EOF
	}
	if err != nil {
		return nil, ErrTruncated
	}
	line = strings.TrimSuffix(line, "\r\n")
	if strings.HasPrefix(line, "#") {
		return nil, nil
	}
	if !strings.HasPrefix(line, "*") {
		return nil, fmt.Errorf("resp: want an array, got %q", line)
	}
	n, err := strconv.Atoi(line[1:])
	if err != nil || n < 1 {
		return nil, fmt.Errorf("resp: bad array header %q", line)
	}
	args := make([]string, n)
	for i := range args {
		h, err := r.ReadString('\n')
		if err != nil {
			return nil, ErrTruncated
		}
		h = strings.TrimSuffix(h, "\r\n")
		if !strings.HasPrefix(h, "$") {
			return nil, fmt.Errorf("resp: want a bulk string, got %q", h)
		}
		m, err := strconv.Atoi(h[1:])
		if err != nil || m < 0 {
			return nil, fmt.Errorf("resp: bad bulk header %q", h)
		}
		buf := make([]byte, m+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, ErrTruncated
		}
		args[i] = string(buf[:m])
	}
	return args, nil
}
