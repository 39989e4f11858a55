package serveraudit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
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
	l := &Log{Backend: "valkey", Rounding: time.Millisecond}
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
//
// The lease key is a string "TTL M TOKEN:OWNER" whose expiry (PXAT, ms)
// is the grant's expiry E minus 1ms; the grant's acquired time is E - TTL
// (see backend/valkey's scripts.go). So:
//
//   - SET lease value PXAT when, in a MULTI block that also INCRs the
//     lease's token counter: a grant;
//   - SET lease value PXAT when otherwise: a renewal that changed the TTL;
//   - PEXPIREAT lease when: a renewal (the TTL is the current grant's);
//   - SETRANGE lease offset "!": a waiting contender's mark, no change to
//     the grant (skipped);
//   - DEL or UNLINK: an End.
//
// Every record with a server time (a grant's or renewal's acquired time)
// also brackets the Ends around it, whatever its prefix.
func replay(cmds []command, prefix string) []Record {
	var all []Record
	var txn int64
	incr := map[string]bool{} // token counters INCRed in the current MULTI block
	for _, c := range cmds {
		name := strings.ToUpper(c.args[0])
		switch name {
		case "MULTI":
			txn = int64(c.pos)
			clear(incr)
			continue
		case "EXEC":
			txn = 0
			clear(incr)
			continue
		case "INCR":
			if len(c.args) == 2 {
				incr[c.args[1]] = true
			}
			continue
		case "SELECT", "PUBLISH":
			continue
		}
		if len(c.args) < 2 {
			continue
		}
		switch name {
		case "SET":
			r := Record{Seq: c.pos, Key: c.args[1], Txn: txn}
			ttl, tok, owner, ok := leaseValue(c.args)
			when, okWhen := pxat(c.args)
			if !ok || !okWhen {
				r.Kind, r.Detail = Unknown, "SET of another shape"
				all = append(all, r)
				continue
			}
			r.Expires = time.UnixMicro((when + 1) * 1000)
			r.Acquired = r.Expires.Add(-time.Duration(ttl) * time.Microsecond)
			r.At = r.Acquired
			if strings.HasSuffix(c.args[1], ":lease") && incr[strings.TrimSuffix(c.args[1], ":lease")+":token"] {
				r.Kind, r.Owner, r.Token = Grant, owner, tok
			} else {
				r.Kind, r.Owner, r.Token = Renew, owner, tok
			}
			all = append(all, r)
		case "PEXPIREAT":
			r := Record{Seq: c.pos, Kind: Renew, Key: c.args[1], Txn: txn}
			when, err := strconv.ParseInt(c.args[len(c.args)-1], 10, 64)
			if len(c.args) != 3 || err != nil {
				r.Kind, r.Detail = Unknown, "PEXPIREAT of another shape"
			} else {
				r.Expires = time.UnixMicro((when + 1) * 1000) // Acquired: from the grant's TTL, below
			}
			all = append(all, r)
		case "SETRANGE":
			if len(c.args) == 4 && c.args[3] == "!" {
				continue // a waiting contender's mark
			}
			all = append(all, Record{Seq: c.pos, Kind: Unknown, Key: c.args[1], Txn: txn, Detail: "SETRANGE of another shape"})
		case "DEL", "UNLINK":
			for _, k := range c.args[1:] {
				all = append(all, Record{Seq: c.pos, Kind: End, Key: k, Txn: txn})
			}
		default:
			all = append(all, Record{Seq: c.pos, Kind: Unknown, Key: c.args[1], Txn: txn, Detail: name})
		}
	}
	// A renewal by PEXPIREAT takes the grant's owner, token and TTL from
	// the replay (of every prefix: their times bracket the Ends too).
	type cur struct {
		owner string
		token uint64
		ttl   time.Duration
	}
	state := map[string]cur{}
	for i := range all {
		r := &all[i]
		switch r.Kind {
		case Grant:
			state[r.Key] = cur{r.Owner, r.Token, r.Expires.Sub(r.Acquired)}
		case Renew:
			c, live := state[r.Key]
			switch {
			case r.Owner == "" && live:
				r.Owner, r.Token = c.owner, c.token
				r.Acquired = r.Expires.Add(-c.ttl)
				r.At = r.Acquired
			case r.Owner != "" && live:
				state[r.Key] = cur{c.owner, c.token, r.Expires.Sub(r.Acquired)}
			}
		case End:
			delete(state, r.Key)
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
	// Keep the lease keys under prefix.
	var out []Record
	for _, r := range all {
		if key, ok := leaseKey(r.Key, prefix); ok {
			r.Key = key
			out = append(out, r)
		}
	}
	return out
}

// leaseValue parses the value of a SET of a lease key: "TTL M TOKEN:OWNER"
// (M is ':' or '!').
func leaseValue(args []string) (ttl int64, token uint64, owner string, ok bool) {
	if len(args) < 3 {
		return 0, 0, "", false
	}
	v := args[2]
	i := strings.IndexAny(v, ":!")
	if i <= 0 {
		return 0, 0, "", false
	}
	ttl, err := strconv.ParseInt(v[:i], 10, 64)
	tokText, owner, cut := strings.Cut(v[i+1:], ":")
	token, err2 := strconv.ParseUint(tokText, 10, 64)
	if err != nil || err2 != nil || !cut || ttl <= 0 {
		return 0, 0, "", false
	}
	return ttl, token, owner, true
}

// pxat returns the PXAT option of a SET command's arguments.
func pxat(args []string) (int64, bool) {
	for i := 3; i+1 < len(args); i++ {
		if strings.EqualFold(args[i], "PXAT") {
			n, err := strconv.ParseInt(args[i+1], 10, 64)
			return n, err == nil
		}
	}
	return 0, false
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
