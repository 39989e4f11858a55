package bench

// The floor: the minimal fenced script (Redis) or statement (PostgreSQL)
// per operation, sent bare through the same driver the library uses.
//
// The script and statement texts below MUST stay identical to those of the
// peers harness (../shared/peersbench/adapter_rawredis.go and
// adapter_rawpg.go): both harnesses measure the library against this floor,
// and their ratios are comparable only while the floor is the same.

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/valkey-io/valkey-go"
)

var (
	rawAcquire = valkey.NewLuaScript(`if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local t = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. t, 'PX', ARGV[2])
return t`)
	rawRelease = valkey.NewLuaScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)
	rawRenew = valkey.NewLuaScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0`)
)

const (
	rawPGSchema = `CREATE TABLE IF NOT EXISTS raw_leases (
	key        text PRIMARY KEY,
	owner      text,
	token      bigint NOT NULL,
	expires_at timestamptz NOT NULL
)`
	rawPGAcquire = `INSERT INTO raw_leases AS l (key, owner, token, expires_at)
VALUES ($1, $2, 1, now() + $3 * interval '1 millisecond')
ON CONFLICT (key) DO UPDATE
   SET owner = EXCLUDED.owner, token = l.token + 1, expires_at = EXCLUDED.expires_at
 WHERE l.expires_at <= now()
RETURNING token`
	rawPGRelease = `UPDATE raw_leases SET owner = NULL, expires_at = '-infinity'
WHERE key = $1 AND owner = $2 AND token = $3`
	rawPGRenew = `UPDATE raw_leases SET expires_at = now() + $4 * interval '1 millisecond'
WHERE key = $1 AND owner = $2 AND token = $3 AND expires_at > now()`
)

// errLost is a floor renewal or release that found the lease gone: never
// expected in these workloads.
var errLost = errors.New("bench: floor lease lost")

// floorValkey is the Redis floor: one EVALSHA per acquire, release and
// renew, as the peers harness's raw-redis adapter does.
type floorValkey struct {
	c      valkey.Client
	owner  string
	prefix string // starts every key name
	ms     string // the TTL in milliseconds
}

type floorValkeyHeld struct {
	key, val string
	tok      uint64
}

func newFloorValkey(c valkey.Client, prefix string, ttl time.Duration) *floorValkey {
	return &floorValkey{c: c, owner: newOwner(), prefix: prefix, ms: strconv.FormatInt(ttl.Milliseconds(), 10)}
}

func (l *floorValkey) tryAcquire(ctx context.Context, name string) (floorValkeyHeld, error) {
	key := l.prefix + name
	tok, err := rawAcquire.Exec(ctx, l.c, []string{key, key + ":fence"}, []string{l.owner, l.ms}).AsInt64()
	if err != nil {
		return floorValkeyHeld{}, err
	}
	if tok == 0 {
		return floorValkeyHeld{}, errBusy
	}
	return floorValkeyHeld{key: key, val: l.owner + ":" + strconv.FormatInt(tok, 10), tok: uint64(tok)}, nil
}

func (l *floorValkey) acquire(context.Context, string) (floorValkeyHeld, error) {
	return floorValkeyHeld{}, errNoWait
}

func (l *floorValkey) renew(ctx context.Context, h *floorValkeyHeld) error {
	n, err := rawRenew.Exec(ctx, l.c, []string{h.key}, []string{h.val, l.ms}).AsInt64()
	if err == nil && n != 1 {
		return errLost
	}
	return err
}

func (l *floorValkey) release(ctx context.Context, h *floorValkeyHeld) error {
	n, err := rawRelease.Exec(ctx, l.c, []string{h.key}, []string{h.val}).AsInt64()
	if err == nil && n != 1 {
		return errLost
	}
	return err
}

func (l *floorValkey) token(h *floorValkeyHeld) uint64 { return h.tok }

// floorPG is the PostgreSQL floor: one autocommitted statement per
// acquire, release and renew, through a pgx pool with cached prepared
// statements, as the peers harness's raw-pg adapter does. The pool's
// search_path names the schema of raw_leases, so the statement texts stay
// unqualified.
type floorPG struct {
	p      *pgxpool.Pool
	owner  string
	prefix string
	ms     int64
}

type floorPGHeld struct {
	key string
	tok int64
}

func newFloorPG(p *pgxpool.Pool, prefix string, ttl time.Duration) *floorPG {
	return &floorPG{p: p, owner: newOwner(), prefix: prefix, ms: ttl.Milliseconds()}
}

func (l *floorPG) tryAcquire(ctx context.Context, name string) (floorPGHeld, error) {
	key := l.prefix + name
	var tok int64
	err := l.p.QueryRow(ctx, rawPGAcquire, key, l.owner, l.ms).Scan(&tok)
	if err == pgx.ErrNoRows {
		return floorPGHeld{}, errBusy
	}
	if err != nil {
		return floorPGHeld{}, err
	}
	return floorPGHeld{key: key, tok: tok}, nil
}

func (l *floorPG) acquire(context.Context, string) (floorPGHeld, error) {
	return floorPGHeld{}, errNoWait
}

func (l *floorPG) renew(ctx context.Context, h *floorPGHeld) error {
	ct, err := l.p.Exec(ctx, rawPGRenew, h.key, l.owner, h.tok, l.ms)
	if err == nil && ct.RowsAffected() != 1 {
		return errLost
	}
	return err
}

func (l *floorPG) release(ctx context.Context, h *floorPGHeld) error {
	ct, err := l.p.Exec(ctx, rawPGRelease, h.key, l.owner, h.tok)
	if err == nil && ct.RowsAffected() != 1 {
		return errLost
	}
	return err
}

func (l *floorPG) token(h *floorPGHeld) uint64 { return uint64(h.tok) }
