package local

import (
	kubeentry "github.com/locksuite/locksuite/harness/services/kube/entry"
	redisentry "github.com/locksuite/locksuite/harness/services/redis/entry"
	zookeeperentry "github.com/locksuite/locksuite/harness/services/zookeeper/entry"
)

// The variables of the suite's own that configure a service the user runs,
// where its ecosystem has none; each service's entry documents its own.
const (
	// RedisCACertEnv names a PEM file of the CA that signed a rediss://
	// server's certificate (see the redis entry).
	RedisCACertEnv = redisentry.CACertEnv
	// ZooKeeperAuthEnv is "user:password" for ZooKeeper's digest scheme.
	ZooKeeperAuthEnv = zookeeperentry.AuthEnv
	// ZooKeeperCACertEnv names a PEM file of the CA of the ZooKeeper
	// servers' certificates: with it, the clients speak TLS.
	ZooKeeperCACertEnv = zookeeperentry.CACertEnv
	// ZooKeeperCertEnv and ZooKeeperKeyEnv name a client certificate and
	// its key (PEM), for a server whose ssl.clientAuth is need.
	ZooKeeperCertEnv = zookeeperentry.CertEnv
	ZooKeeperKeyEnv  = zookeeperentry.KeyEnv
	// KubeNamespaceEnv names an existing namespace of the kubeconfig's
	// cluster for the suite's Leases (see the kube entry).
	KubeNamespaceEnv = kubeentry.NamespaceEnv
)
