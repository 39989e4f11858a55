package testserver

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// clusterTimeout bounds redis-cli --cluster create and the wait for every
// node to report cluster_state:ok.
const clusterTimeout = 60 * time.Second

// RedisCluster is a private Valkey or Redis Cluster of masters only (no
// replicas), every node a RedisServer on loopback. Safe for concurrent use.
type RedisCluster struct {
	nodes []*RedisServer // fixed at start
}

// StartRedisCluster starts masters (at least 3) cluster-enabled servers
// (--cluster-node-timeout 2000, each with its bus on a free port of its own,
// which needs Redis 7 or Valkey), joins them with valkey-cli or redis-cli
// --cluster create, spreading the 16384 slots evenly, and waits (bounded)
// until every node reports cluster_state:ok. It returns an error wrapping
// ErrNoServer when there is no server binary or no cli.
func StartRedisCluster(masters int) (*RedisCluster, error) {
	if masters < 3 {
		return nil, fmt.Errorf("testserver: a redis cluster needs at least 3 masters, not %d", masters)
	}
	cli, err := FindBinary([]string{"valkey-cli", "redis-cli"})
	if err != nil {
		return nil, fmt.Errorf("testserver: no valkey-cli or redis-cli on PATH: %w", err)
	}
	c := &RedisCluster{}
	busPort := func(_ int, reserve func() (int, error)) ([]string, error) {
		bus, err := reserve()
		if err != nil {
			return nil, fmt.Errorf("testserver: free bus port: %w", err)
		}
		return []string{"--cluster-port", strconv.Itoa(bus)}, nil
	}
	for range masters {
		s, err := startRedis(RedisOptions{Args: []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000",
		}}, busPort)
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.nodes = append(c.nodes, s)
	}
	if err := c.create(cli); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// create runs the cli's cluster create and waits for cluster_state:ok.
func (c *RedisCluster) create(cli string) error {
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("testserver: %s --cluster create: %w: %s", cli, err, tail(out))
	}
	return c.waitOK(ctx)
}

// WaitOK waits, up to timeout, until every node reports cluster_state:ok,
// e.g. after a test restarted one. It returns an error naming the first
// node that did not.
func (c *RedisCluster) WaitOK(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return c.waitOK(ctx)
}

func (c *RedisCluster) waitOK(ctx context.Context) error {
	for _, s := range c.nodes {
		for {
			info, err := s.Do("CLUSTER", "INFO")
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("testserver: node %s not cluster_state:ok in time (last: %v): %s",
					s.Addr(), err, firstLine(info))
			}
			time.Sleep(pollEvery)
		}
	}
	return nil
}

// Addrs returns the nodes' "127.0.0.1:port" addresses, a seed list for a
// cluster client.
func (c *RedisCluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, s := range c.nodes {
		addrs[i] = s.Addr()
	}
	return addrs
}

// Nodes returns the nodes, so that a test can Kill, Pause or Restart one
// (a restarted node keeps its nodes.conf, so it rejoins with its slots).
func (c *RedisCluster) Nodes() []*RedisServer {
	return append([]*RedisServer(nil), c.nodes...)
}

// Stop stops every node for good and removes their directories. Idempotent.
func (c *RedisCluster) Stop() {
	for _, s := range c.nodes {
		s.Stop()
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(line)
}
