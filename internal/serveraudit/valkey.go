package serveraudit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/leasekit/lease/internal/resp"
)

// ErrNoAOF means the server keeps no append-only file the reader can use.
var ErrNoAOF = errors.New("serveraudit: no append-only file")

// ReadAOF replays the multi-part append-only file in dir (the server's
// appendonlydir) into the records of the lease keys under prefix (the
// valkey store's Options.Prefix). It reads the manifest, then every
// incremental file in order. It returns an error wrapping ErrNoAOF when
// dir holds no manifest, and an error when the manifest shows an AOF
// rewrite (the history before it is folded into a snapshot this reader
// does not parse). A truncated last command (a crash in the middle of a
// write) ends the replay with a note.
func ReadAOF(dir, prefix string) (*Log, error) {
	files, err := manifest(dir)
	if err != nil {
		return nil, err
	}
	l := &Log{Backend: "valkey"}
	var cmds []command
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return nil, fmt.Errorf("serveraudit: %w", err)
		}
		cs, err := parseCommands(b, len(cmds))
		if err != nil {
			l.Notes = append(l.Notes, fmt.Sprintf("%s: %v: replay ends there", f, err))
		}
		cmds = append(cmds, cs...)
	}
	l.Records = replay(cmds, prefix)
	return l, nil
}

// manifest returns the incremental files of dir's manifest in order.
func manifest(dir string) ([]string, error) {
	matches, _ := filepath.Glob(filepath.Join(dir, "*.manifest"))
	if len(matches) != 1 {
		return nil, fmt.Errorf("%w in %s (%d manifests)", ErrNoAOF, dir, len(matches))
	}
	b, err := os.ReadFile(matches[0])
	if err != nil {
		return nil, fmt.Errorf("serveraudit: %w", err)
	}
	type entry struct {
		name string
		seq  int
	}
	var incr []entry
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		kv := map[string]string{}
		for i := 0; i+1 < len(f); i += 2 {
			kv[f[i]] = f[i+1]
		}
		seq, err := strconv.Atoi(kv["seq"])
		if err != nil {
			return nil, fmt.Errorf("serveraudit: manifest line %q: %w", strings.TrimSpace(line), err)
		}
		switch kv["type"] {
		case "b":
			if seq != 1 {
				return nil, fmt.Errorf("serveraudit: the append-only file was rewritten (base seq %d): its history is folded into a snapshot", seq)
			}
		case "h":
			return nil, errors.New("serveraudit: the append-only file was rewritten (history files in the manifest)")
		case "i":
			incr = append(incr, entry{kv["file"], seq})
		default:
			return nil, fmt.Errorf("serveraudit: manifest line %q: unknown type", strings.TrimSpace(line))
		}
	}
	if len(incr) != 1 || incr[0].seq != 1 {
		return nil, fmt.Errorf("serveraudit: the append-only file was rewritten (%d incremental files)", len(incr))
	}
	return []string{incr[0].name}, nil
}

// command is one command of the file, with its position.
type command struct {
	pos  int
	args []string
}

// parseCommands reads RESP arrays of bulk strings (the file's format) and
// "#..." annotation lines. On a malformed or truncated command it returns
// what it read before, with an error.
func parseCommands(b []byte, base int) ([]command, error) {
	r := bufio.NewReader(bytes.NewReader(b))
	var out []command
	for n := base; ; n++ {
		args, err := resp.ReadCommand(r)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		if args == nil {
			n-- // an annotation
			continue
		}
		out = append(out, command{pos: n, args: args})
	}
}

// replay turns commands into records of the lease keys under prefix.
// Every record with a server time (the scripts' HSET acquired) also
// brackets the Ends around it, whatever its prefix.
func replay(cmds []command, prefix string) []Record {
	var all []Record
	var txn int64
	for _, c := range cmds {
		name := strings.ToUpper(c.args[0])
		switch name {
		case "MULTI":
			txn = int64(c.pos)
			continue
		case "EXEC":
			txn = 0
			continue
		case "SELECT", "INCR", "PEXPIREAT", "PUBLISH":
			continue
		}
		if len(c.args) < 2 {
			continue
		}
		switch name {
		case "HSET", "HMSET":
			r := Record{Seq: c.pos, Key: c.args[1], Txn: txn}
			fields := map[string]string{}
			for i := 2; i+1 < len(c.args); i += 2 {
				fields[c.args[i]] = c.args[i+1]
			}
			r.Acquired, r.Expires = micros(fields["acquired"]), micros(fields["expires"])
			r.At = r.Acquired
			_, hasOwner := fields["owner"]
			switch {
			case hasOwner && len(fields) == 4:
				r.Kind, r.Owner = Grant, fields["owner"]
				r.Token, _ = strconv.ParseUint(fields["token"], 10, 64)
			case len(fields) == 2 && !r.Acquired.IsZero() && !r.Expires.IsZero():
				r.Kind = Renew
			default:
				r.Kind, r.Detail = Unknown, fmt.Sprintf("HSET of fields %v", keysOf(fields))
			}
			all = append(all, r)
		case "DEL", "UNLINK":
			for _, k := range c.args[1:] {
				all = append(all, Record{Seq: c.pos, Kind: End, Key: k, Txn: txn})
			}
		default:
			all = append(all, Record{Seq: c.pos, Kind: Unknown, Key: c.args[1], Txn: txn, Detail: name})
		}
	}
	// Bracket the Ends by the server times around them.
	var last time.Time
	for i := range all {
		if !all[i].At.IsZero() {
			last = all[i].At
		} else if all[i].Kind == End {
			all[i].NotBefore = last
		}
	}
	last = time.Time{}
	for i := len(all) - 1; i >= 0; i-- {
		if !all[i].At.IsZero() {
			last = all[i].At
		} else if all[i].Kind == End {
			all[i].NotAfter = last
		}
	}
	// Keep the lease hashes under prefix; renewals take the grant's
	// owner and token from the replay.
	var out []Record
	type cur struct {
		owner string
		token uint64
	}
	state := map[string]cur{}
	for _, r := range all {
		key, ok := leaseKey(r.Key, prefix)
		if !ok {
			continue
		}
		r.Key = key
		switch r.Kind {
		case Grant:
			state[key] = cur{r.Owner, r.Token}
		case Renew:
			c := state[key]
			r.Owner, r.Token = c.owner, c.token
		case End:
			delete(state, key)
		}
		out = append(out, r)
	}
	return out
}

// leaseKey maps the lease key "prefix:{ns/name}:lease" back to the key
// text "ns/name" (unescaping what the store escaped).
func leaseKey(server, prefix string) (string, bool) {
	head := prefix + ":{"
	if !strings.HasPrefix(server, head) || !strings.HasSuffix(server, "}:lease") {
		return "", false
	}
	id := server[len(head) : len(server)-len("}:lease")]
	if strings.ContainsAny(id, "{}") {
		return "", false
	}
	ns, name, ok := strings.Cut(id, "/")
	if !ok {
		return "", false
	}
	un := strings.NewReplacer("%3A", ":", "%7D", "}", "%7B", "{", "%25", "%")
	return un.Replace(ns) + "/" + un.Replace(name), true
}

func micros(s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.UnixMicro(n)
}

func keysOf(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
