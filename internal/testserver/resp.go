package testserver

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// errRedisNil is the nil bulk reply ("$-1"): the key does not exist.
var errRedisNil = errors.New("testserver: redis nil reply")

// redisDo sends one command to the Redis server at addr on a fresh
// connection, bounded by timeout, and returns the reply as text: a simple or
// bulk string as is, an integer in decimal. An error reply is returned as an
// error, the nil reply as errRedisNil. Arrays are not supported: this is just
// enough RESP to check on and configure a server without a client library.
func redisDo(addr string, timeout time.Duration, args ...string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return "", fmt.Errorf("testserver: dial redis: %w", err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return "", fmt.Errorf("testserver: redis deadline: %w", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(conn, b.String()); err != nil {
		return "", fmt.Errorf("testserver: write redis command: %w", err)
	}
	return readReply(bufio.NewReader(conn))
}

// readReply reads one non-array RESP2 reply.
func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("testserver: read redis reply: %w", err)
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", errors.New("testserver: empty redis reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", fmt.Errorf("testserver: redis error reply: %s", line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", fmt.Errorf("testserver: bad redis bulk length %q: %w", line, err)
		}
		if n < 0 {
			return "", errRedisNil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", fmt.Errorf("testserver: read redis bulk: %w", err)
		}
		return string(buf[:n]), nil
	default:
		return "", fmt.Errorf("testserver: unsupported redis reply type %q", line[0])
	}
}
