package resp_test

import (
	"bufio"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/leasekit/lease/internal/resp"
)

func TestReadCommand(t *testing.T) {
	in := "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n#TS:1700000000\r\n*1\r\n$0\r\n\r\n"
	r := bufio.NewReader(strings.NewReader(in))
	for i, want := range [][]string{{"GET", "k"}, nil, {""}} {
		got, err := resp.ReadCommand(r)
		if err != nil || !slices.Equal(got, want) || (got == nil) != (want == nil) {
			t.Fatalf("command %d: got %q, %v; want %q", i, got, err, want)
		}
	}
	if _, err := resp.ReadCommand(r); err != io.EOF {
		t.Fatalf("at the end: got %v, want io.EOF", err)
	}

	for _, bad := range []string{
		"*2\r\n$3\r\nGET\r\n", // an argument missing
		"*1\r\n$5\r\nGET\r\n", // a bulk string cut short
		"*1\r\n$3\r\nGET",     // no final CRLF
		"*1",                  // no end of line
		"+OK\r\n",             // not an array
		"*0\r\n",              // an empty array
		"*x\r\n",              // a bad array header
		"*1\r\n:3\r\n",        // not a bulk string
		"*1\r\n$-1\r\n",       // a nil bulk string
	} {
		_, err := resp.ReadCommand(bufio.NewReader(strings.NewReader(bad)))
		if err == nil || err == io.EOF {
			t.Errorf("%q: got %v, want an error", bad, err)
		}
		if strings.HasPrefix(bad, "*1\r\n$5") && !errors.Is(err, resp.ErrTruncated) {
			t.Errorf("%q: got %v, want ErrTruncated", bad, err)
		}
	}
}
