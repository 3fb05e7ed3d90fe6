package natstest

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/apbridge/apbridge/testcluster/internal/option"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/rs/zerolog"
)

// Option configures Start, in nats.go's style: it sets a field of the
// cluster's configuration, or returns an error that Start returns before
// it starts anything.
type Option func(*config) error

// config is what the Options set.
type config struct {
	option.Common
	option.Latency
	nodes     int
	jetStream bool
	ldmDur    time.Duration
	ldmGrace  time.Duration
	tls       bool
	proxies   bool
	dir       string
	user      string
	password  string
	// accounts is WithAccounts' server configuration text.
	accounts string
	// name is WithName's cluster name, "" for the default.
	name string
	// domain is WithDomain's JetStream domain.
	domain string
	// leafListen opens a leaf node port behind a proxy on every node
	// (WithLeafListen); leafRemotes are the URLs every node connects to
	// as a leaf node (WithLeafRemotes).
	leafListen  bool
	leafRemotes []string
	// leafCompression is WithLeafCompression's mode of the leaf remotes,
	// "" for the server's default (s2_auto).
	leafCompression string
}

// newConfig applies opts to the defaults (see option.Apply).
func newConfig(opts []Option) (config, error) {
	cfg := config{
		Common:   option.Common{Logger: zerolog.Nop(), ReadyWait: 30 * time.Second},
		nodes:    3,
		ldmGrace: 10 * time.Second,
	}
	err := option.Apply(&cfg, opts)
	return cfg, err
}

// WithLogger sends the servers' log lines to l (default: no logging).
func WithLogger(l zerolog.Logger) Option {
	return func(c *config) error { c.Logger = l; return nil }
}

// WithClientRTT adds rtt/2 of latency in each direction between clients
// and every node, through a faultproxy.Proxy in front of every node, as
// WithProxies.
func WithClientRTT(rtt time.Duration) Option {
	return func(c *config) error {
		c.proxies = true
		return c.SetClientRTT("natstest", rtt)
	}
}

// WithReadyTimeout bounds how long Start and a Restart wait for the
// cluster to forward end to end (default 30 s).
func WithReadyTimeout(d time.Duration) Option {
	return func(c *config) error { return c.SetReadyTimeout("natstest", d) }
}

// WithNodes sets the number of nodes (default 3, at least 1).
func WithNodes(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("natstest: WithNodes(%d): a cluster needs at least 1 node", n)
		}
		c.nodes = n
		return nil
	}
}

// WithJetStream enables JetStream on every node with a store in a temporary
// directory that Close removes.
func WithJetStream() Option {
	return func(c *config) error { c.jetStream = true; return nil }
}

// WithLameDuck sets the lame-duck duration and grace period of every node.
// The grace period is how long a node waits after announcing LDM before it
// evicts its clients; the duration bounds the whole eviction. The defaults
// are a 10 s grace, as nats-server ships, and a duration 1 s longer so that
// every client is gone soon after the grace period ends; a duration of 0
// means that default. nats-server requires the grace to be shorter than
// the duration.
func WithLameDuck(duration, grace time.Duration) Option {
	return func(c *config) error {
		c.ldmDur, c.ldmGrace = duration, grace
		return nil
	}
}

// WithTLS serves TLS on every client port, with a certificate signed by a CA
// generated at start (see Cluster.CA).
func WithTLS() Option {
	return func(c *config) error { c.tls = true; return nil }
}

// WithUser makes every node require this user and password of clients;
// ClientOptions carries them. For tests of refused credentials.
func WithUser(user, password string) Option {
	return func(c *config) error {
		if user == "" || password == "" {
			return fmt.Errorf("natstest: WithUser: user and password must not be empty")
		}
		if c.accounts != "" {
			return fmt.Errorf("natstest: WithUser: WithAccounts was given too; its users replace it")
		}
		c.user, c.password = user, password
		return nil
	}
}

// WithProxies puts a faultproxy.Proxy in front of every node's client
// port. The URLs the cluster hands out, and the ones nodes advertise to
// clients, go through the proxies.
func WithProxies() Option {
	return func(c *config) error { c.proxies = true; return nil }
}

// WithDir keeps server state (JetStream store, CA file) under dir instead of
// a temporary directory. The directory is not removed by Close.
func WithDir(dir string) Option {
	return func(c *config) error { c.dir = dir; return nil }
}

// WithAccounts gives every node the accounts, users and their permissions
// of conf, nats-server configuration text such as
//
//	accounts {
//	  RELAY: { users: [{user: relay, password: r}], exports: [{service: "apbridge.write.>"}] }
//	  PLANT: { users: [{user: alice, password: a}], imports: [{service: {account: RELAY, subject: "apbridge.write.>"}, share: true}] }
//	}
//
// for tests of what crosses accounts (a service import, and the
// Nats-Request-Info header the server sets on it). The cluster's own
// probes and ClientOptions log in as user and password, one of conf's
// users; other clients give their own. A conf the server would refuse
// fails Start before it starts anything.
func WithAccounts(conf, user, password string) Option {
	return func(c *config) error {
		if user == "" || password == "" {
			return errors.New("natstest: WithAccounts(...): the probes' user and password must not be empty")
		}
		if c.user != "" && c.accounts == "" {
			return errors.New("natstest: WithAccounts(...): WithUser was given too; the accounts' users replace it")
		}
		if err := parseAccounts(&server.Options{}, conf); err != nil {
			return fmt.Errorf("natstest: WithAccounts(...): %w", err)
		}
		c.accounts, c.user, c.password = conf, user, password
		return nil
	}
}

// parseAccounts applies conf to o. The server reports warnings (such as
// an unused setting) as an error that holds no errors: those pass.
func parseAccounts(o *server.Options, conf string) error {
	err := o.ProcessConfigString(conf)
	var list interface{ Errors() []error }
	if errors.As(err, &list) && len(list.Errors()) == 0 {
		return nil
	}
	return err
}

// WithName names the cluster and prefixes its node names with it
// ("site" gives nodes site-n1, site-n2, ...), so that the servers of
// clusters joined by leaf node connections have distinct names. The
// default is the cluster "apbridge" with nodes n1, n2, ...
func WithName(name string) Option {
	return func(c *config) error {
		if name == "" || strings.ContainsAny(name, " .*>\t\n") {
			return fmt.Errorf("natstest: WithName(%q): a cluster name is one token without spaces or wildcards", name)
		}
		c.name = name
		return nil
	}
}

// WithDomain puts the nodes' JetStream in the domain d: its API is also
// reachable as $JS.<d>.API from servers joined by leaf node connections,
// and JetStream API traffic does not cross a leaf node connection between
// different domains. It implies WithJetStream.
func WithDomain(d string) Option {
	return func(c *config) error {
		if d == "" || strings.ContainsAny(d, " .*>\t\n") {
			return fmt.Errorf("natstest: WithDomain(%q): a domain is one token without spaces or wildcards", d)
		}
		c.domain, c.jetStream = d, true
		return nil
	}
}

// WithLeafListen opens a leaf node port on every node, each behind a
// faultproxy.Proxy of its own (Node.LeafProxy): the link a leaf cluster
// dials (Node.LeafURL), where a test cuts, freezes or slows the WAN.
func WithLeafListen() Option {
	return func(c *config) error { c.leafListen = true; return nil }
}

// LeafCompressionModes are the modes WithLeafCompression takes, as
// nats-server names them.
func LeafCompressionModes() []string {
	return []string{"off", "s2_uncompressed", "s2_fast", "s2_better", "s2_best", "s2_auto"}
}

// WithLeafCompression sets how every node compresses what it sends on its
// leaf connections (WithLeafRemotes): off, s2_uncompressed, s2_fast,
// s2_better, s2_best or s2_auto. Without it the server's default,
// s2_auto, picks the mode from the connection's round trip and moves to
// s2_best when the round trip passes 100 ms, which a site's own load does
// in a catch-up: its servers then spend their cores compressing the
// backlog.
func WithLeafCompression(mode string) Option {
	return func(c *config) error {
		if !slices.Contains(LeafCompressionModes(), mode) {
			return fmt.Errorf("natstest: WithLeafCompression(%q): not a mode (valid: %s)", mode, strings.Join(LeafCompressionModes(), ", "))
		}
		c.leafCompression = mode
		return nil
	}
}

// WithLeafRemotes makes every node a leaf node of the servers at urls
// (nats-leaf:// or nats:// URLs of leaf node ports, such as another
// cluster's Node.LeafURL): each node keeps one leaf connection to one of
// them and moves to another when it breaks.
func WithLeafRemotes(urls ...string) Option {
	return func(c *config) error {
		if len(urls) == 0 {
			return errors.New("natstest: WithLeafRemotes(): give at least one URL")
		}
		for _, u := range urls {
			if _, err := url.Parse(u); err != nil {
				return fmt.Errorf("natstest: WithLeafRemotes(%q): %w", u, err)
			}
		}
		c.leafRemotes = append([]string(nil), urls...)
		return nil
	}
}
