package testserver

import (
	"strings"
	"testing"
	"time"
)

func TestRedisCluster(t *testing.T) {
	t.Parallel()
	c, err := StartRedisCluster(3)
	if skip := SkipReason("redis cluster", EnvValkeyAddr, err); skip != "" {
		t.Skip(skip)
	}
	defer c.Stop()
	addrs := c.Addrs()
	if len(addrs) != 3 {
		t.Fatalf("Addrs = %v; want 3", addrs)
	}
	for _, a := range addrs {
		info, err := redisDo(a, 5*time.Second, "CLUSTER", "INFO")
		if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_known_nodes:3") {
			t.Errorf("%s CLUSTER INFO: %v\n%s", a, err, info)
		}
	}
	// A key lives on exactly one node; the others redirect.
	moved := 0
	for _, a := range addrs {
		if _, err := redisDo(a, 5*time.Second, "SET", "{lease}k", "v"); err != nil {
			if !strings.Contains(err.Error(), "MOVED") {
				t.Errorf("%s SET: %v; want OK or MOVED", a, err)
			}
			moved++
		}
	}
	if moved != 2 {
		t.Errorf("%d nodes redirected; want 2", moved)
	}
	// A crashed node comes back with its nodes.conf and rejoins.
	nodes := c.Nodes()
	nodes[0].Kill()
	if err := nodes[0].Restart(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitOK(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	pids := make([]int, len(nodes))
	for i, n := range nodes {
		pids[i] = n.p.pid()
	}
	c.Stop()
	c.Stop() // idempotent
	// The ports are free now, and another test binary's server may take
	// one: what must not answer there is this cluster's node.
	for i, n := range nodes {
		if err := redisIsOurs(n.Addr(), pids[i]); err == nil {
			t.Errorf("node %s answers after Stop", n.Addr())
		}
	}
}

func TestStartRedisClusterRejectsTooFewMasters(t *testing.T) {
	if _, err := StartRedisCluster(2); err == nil {
		t.Error("StartRedisCluster(2) succeeded")
	}
}
